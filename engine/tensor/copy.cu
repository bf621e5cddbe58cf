/* Copies between devices (fh__cuda_copy_across): CPU pageable, CPU pinned
 * and CUDA, any strides, honouring the stream and non_blocking.
 *
 * Shape of every copy: make the source contiguous on its own side (a
 * device kernel, or a host gather), move contiguous bytes, then scatter
 * into a non-contiguous destination (a device kernel on the copy's stream,
 * or a host copy after the data have arrived).
 *
 * Pinned host memory moves with one cudaMemcpyAsync; the pinned storage is
 * recorded on the stream, so it is not reused before the copy ends.
 *
 * Pageable host memory goes through pinned staging memory in chunks of up
 * to 8 MiB: host to device, through a fixed ring per device (below), chunk
 * k copied into it by several host threads while the DMAs of the chunks
 * before it run; device to host, through three buffers from the pinned
 * caching allocator, the DMAs running ahead while finished chunks are
 * copied out. A
 * non_blocking copy from pageable memory returns once the last chunk is in
 * pinned memory: the source may be changed or freed at once, and the
 * ring's bytes are not reused until their DMA completes. A
 * copy into pageable memory always completes before returning.
 *
 * During a CUDA capture only copies between device memory and pinned memory
 * with non_blocking are possible (anything else needs the host to act at
 * capture time): the others fail with CudaGraphCaptureError. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_internal.h"
#include "fh/internal.h"
#include "fh/kernels.h"

#define STAGE_CHUNK ((size_t)8 << 20)
#define STAGE_NBUF 3

/* ---- parallel host memcpy ---------------------------------------------------- */
#define MEMCPY_MAX_THREADS 15
#define MEMCPY_PIECE ((size_t)1 << 20)

static pthread_mutex_t P_mu = PTHREAD_MUTEX_INITIALIZER;   /* guards P */
static pthread_mutex_t P_busy = PTHREAD_MUTEX_INITIALIZER; /* one parallel copy at a time */
static pthread_cond_t P_go = PTHREAD_COND_INITIALIZER, P_done = PTHREAD_COND_INITIALIZER;
static struct {
  int nthreads;
  uint64_t gen;
  char *dst;
  const char *src;
  size_t n, piece;
  int nparts;
  atomic_int next;
  int running;
} P;
static pthread_once_t P_once = PTHREAD_ONCE_INIT;

static void copy_parts(void) {
  for (;;) {
    int i = atomic_fetch_add(&P.next, 1);
    if (i >= P.nparts) return;
    size_t off = (size_t)i * P.piece;
    size_t len = off + P.piece > P.n ? P.n - off : P.piece;
    memcpy(P.dst + off, P.src + off, len);
  }
}

static void *memcpy_worker(void *arg) {
  (void)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&P_mu);
  for (;;) {
    while (P.gen == seen) pthread_cond_wait(&P_go, &P_mu);
    seen = P.gen;
    pthread_mutex_unlock(&P_mu);
    copy_parts();
    pthread_mutex_lock(&P_mu);
    if (--P.running == 0) pthread_cond_signal(&P_done);
  }
  return NULL;
}

static void start_workers(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int n = cpus > 1 ? (int)(cpus / 2) : 0; /* leave half the cores to the rest of the process */
  const char *env = getenv("FHELIUM_COPY_THREADS");
  if (env != NULL) n = atoi(env) - 1;
  if (n > MEMCPY_MAX_THREADS) n = MEMCPY_MAX_THREADS;
  if (n < 0) n = 0;
  int started = 0;
  for (int i = 0; i < n; ++i) {
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, memcpy_worker, NULL) == 0) started++;
    pthread_attr_destroy(&at);
  }
  P.nthreads = started;
}

void fh__host_memcpy(void *dst, const void *src, size_t n) {
  if (n < 2 * MEMCPY_PIECE) {
    memcpy(dst, src, n);
    return;
  }
  pthread_once(&P_once, start_workers);
  if (P.nthreads == 0 || pthread_mutex_trylock(&P_busy) != 0) {
    memcpy(dst, src, n);
    return;
  }
  int workers = P.nthreads;
  size_t parts = (size_t)workers + 1;
  size_t piece = (n + parts - 1) / parts;
  piece = (piece + 4095) / 4096 * 4096;
  if (piece < MEMCPY_PIECE / 2) piece = MEMCPY_PIECE / 2;
  pthread_mutex_lock(&P_mu);
  P.dst = (char *)dst;
  P.src = (const char *)src;
  P.n = n;
  P.piece = piece;
  P.nparts = (int)((n + piece - 1) / piece);
  atomic_store(&P.next, 0);
  P.running = workers;
  P.gen++;
  pthread_cond_broadcast(&P_go);
  pthread_mutex_unlock(&P_mu);
  copy_parts();
  pthread_mutex_lock(&P_mu);
  while (P.running > 0) pthread_cond_wait(&P_done, &P_mu);
  pthread_mutex_unlock(&P_mu);
  pthread_mutex_unlock(&P_busy);
}

/* ---- the staging ring -----------------------------------------------------------
 * Host-to-device copies from pageable memory go through one ring of pinned
 * memory per device (STAGE_RING bytes, taken from the pinned allocator at
 * the first such copy and kept until fh_cuda_empty_cache). Each chunk takes
 * the next free bytes of the ring and an event recorded after its DMA; a
 * chunk that needs bytes an earlier DMA may still read first waits on the
 * host for the oldest DMAs to end. So the pinned memory that staging uses
 * is fixed however many copies are in flight (a pool of per-copy blocks
 * grows to the most ever in flight at once), small copies pack densely
 * (a thousand 32 KiB copies in flight wait for nothing), and a copy of many
 * chunks still overlaps the host copy of one chunk with the DMAs of the
 * two before it. The ring's lock is held for the whole copy. */
#define STAGE_RING ((size_t)STAGE_NBUF * STAGE_CHUNK)
#define STAGE_ALIGN ((size_t)4096)
#define STAGE_REGIONS 1024

typedef struct ring_region {
  size_t off;
  cudaEvent_t ev;
} ring_region;
typedef struct stage_ring {
  pthread_mutex_t mu;
  fh_storage *buf;                  /* NULL until the first staged copy */
  ring_region q[STAGE_REGIONS];     /* the chunks in flight, oldest first (a circular queue) */
  int first, count;
  size_t head;                      /* where the next chunk goes when it fits */
} stage_ring;
static stage_ring g_ring[FH_CUDA_MAX_DEVICES];
static pthread_once_t g_ring_once = PTHREAD_ONCE_INIT;
static void ring_init(void) {
  for (int i = 0; i < FH_CUDA_MAX_DEVICES; ++i) pthread_mutex_init(&g_ring[i].mu, NULL);
}

/* the oldest chunk's DMA ends (the host waits); its bytes are free again */
static cudaError_t ring_pop(stage_ring *r, int dev) {
  ring_region *g = &r->q[r->first];
  cudaError_t e = cudaEventSynchronize(g->ev);
  fh__cuda_event_put(dev, g->ev);
  r->first = (r->first + 1) % STAGE_REGIONS;
  if (--r->count == 0) r->head = 0;
  return e;
}

/* the offset of len free bytes (len <= STAGE_CHUNK), waiting for the oldest DMAs as needed */
static cudaError_t ring_claim(stage_ring *r, int dev, size_t len, size_t *off) {
  for (;;) {
    if (r->count == 0) {
      *off = 0;
      return cudaSuccess;
    }
    if (r->count < STAGE_REGIONS) {
      const size_t tail = r->q[r->first].off;
      if (r->head > tail) { /* in use: [tail, head); free: [head, end) and [0, tail) */
        if (r->head + len <= STAGE_RING) {
          *off = r->head;
          return cudaSuccess;
        }
        if (len <= tail) {
          *off = 0;
          return cudaSuccess;
        }
      } else if (r->head + len <= tail) { /* wrapped: free is [head, tail) */
        *off = r->head;
        return cudaSuccess;
      }
    }
    cudaError_t e = ring_pop(r, dev);
    if (e != cudaSuccess) return e;
  }
}

static fh_status staged_h2d(char *d, const char *h, size_t n, fh_stream *s) {
  const int dev = s->dev.index;
  pthread_once(&g_ring_once, ring_init);
  stage_ring *r = &g_ring[dev];
  pthread_mutex_lock(&r->mu);
  fh_status st = FH_OK;
  if (r->buf == NULL) st = fh_storage_new(fh_cpu(), STAGE_RING, FH_STORAGE_PINNED, &r->buf);
  /* allocating may have switched the runtime's device (freeing blocks of another) */
  if (st == FH_OK) st = fh__cuda_use_device(dev);
  cudaError_t e = cudaSuccess;
  const char *what = "cudaMemcpyAsync";
  for (size_t off = 0; off < n && st == FH_OK && e == cudaSuccess; off += STAGE_CHUNK) {
    const size_t len = n - off < STAGE_CHUNK ? n - off : STAGE_CHUNK;
    size_t at;
    cudaEvent_t ev;
    if ((e = ring_claim(r, dev, (len + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN, &at)) != cudaSuccess) {
      what = "cudaEventSynchronize";
      break;
    }
    if ((st = fh__cuda_event_get(dev, &ev)) != FH_OK) break;
    char *slot = (char *)r->buf->data + at;
    fh__host_memcpy(slot, h + off, len);
    if ((e = cudaMemcpyAsync(d + off, slot, len, cudaMemcpyHostToDevice, s->h)) == cudaSuccess &&
        (e = cudaEventRecord(ev, s->h)) != cudaSuccess)
      what = "cudaEventRecord";
    if (e != cudaSuccess) {
      /* (a failed record leaves a DMA that nothing waits for: CUDA's errors there are sticky) */
      fh__cuda_event_put(dev, ev);
      break;
    }
    const int k = (r->first + r->count) % STAGE_REGIONS;
    r->q[k].off = at;
    r->q[k].ev = ev;
    r->count++;
    r->head = at + (len + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
  }
  pthread_mutex_unlock(&r->mu);
  if (st == FH_OK && e != cudaSuccess) st = fh__cuda_fail(e, what);
  return st;
}

/* fh_cuda_empty_cache: every ring's DMAs waited for, its memory back to the pinned pool */
void fh__copy_release_staging(void) {
  fh_error_saved keep;
  fh_error_save(&keep);
  pthread_once(&g_ring_once, ring_init);
  for (int dev = 0; dev < FH_CUDA_MAX_DEVICES; ++dev) {
    stage_ring *r = &g_ring[dev];
    pthread_mutex_lock(&r->mu);
    if (r->buf != NULL && fh__cuda_use_device(dev) == FH_OK) {
      bool ok = true;
      while (r->count > 0) ok = ring_pop(r, dev) == cudaSuccess && ok;
      /* after a failed wait (a sticky CUDA error) the DMAs' state is unknown: the ring stays */
      if (ok) {
        fh_storage_release(r->buf);
        r->buf = NULL;
      }
    }
    pthread_mutex_unlock(&r->mu);
  }
  fh_error_restore(&keep);
}

/* ---- staged device-to-host transfers ----------------------------------------------
 * Buffers from the pinned caching allocator; the copy completes before it returns,
 * so they go back to the pool free. */
typedef struct stage {
  fh_storage *buf[STAGE_NBUF];
  cudaEvent_t ev[STAGE_NBUF];
  int nbuf;
  int dev;
} stage;

static void stage_close(stage *sg, fh_stream *s) {
  for (int i = 0; i < sg->nbuf; ++i) {
    if (sg->buf[i]) {
      (void)fh_storage_record_stream(sg->buf[i], s); /* reused only after its DMA */
      fh_storage_release(sg->buf[i]);
    }
    if (sg->ev[i]) fh__cuda_event_put(sg->dev, sg->ev[i]);
  }
  fh_error_clear();
}

static fh_status stage_open(stage *sg, size_t n, fh_stream *s) {
  memset(sg, 0, sizeof *sg);
  sg->dev = s->dev.index;
  size_t chunk = n < STAGE_CHUNK ? n : STAGE_CHUNK;
  size_t nchunks = (n + chunk - 1) / chunk;
  sg->nbuf = nchunks < STAGE_NBUF ? (int)nchunks : STAGE_NBUF;
  for (int i = 0; i < sg->nbuf; ++i) {
    fh_status st = fh_storage_new(fh_cpu(), chunk, FH_STORAGE_PINNED, &sg->buf[i]);
    if (st == FH_OK) st = fh__cuda_event_get(sg->dev, &sg->ev[i]);
    if (st != FH_OK) {
      fh_status keep = st;
      char msg[FH_ERROR_MESSAGE_MAX];
      strncpy(msg, fh_error_message(), sizeof msg - 1);
      msg[sizeof msg - 1] = '\0';
      stage_close(sg, s);
      return fh_error_set(keep, "%s", msg);
    }
  }
  return FH_OK;
}

static fh_status staged_d2h(char *h, const char *d, size_t n, fh_stream *s) {
  stage sg;
  fh_status st = stage_open(&sg, n, s);
  if (st == FH_OK && (st = fh__cuda_use_device(s->dev.index)) != FH_OK) stage_close(&sg, s);
  if (st != FH_OK) return st;
  size_t chunk = n < STAGE_CHUNK ? n : STAGE_CHUNK;
  size_t nchunks = (n + chunk - 1) / chunk;
  cudaError_t e = cudaSuccess;
  const char *what = "cudaMemcpyAsync";
  /* DMAs run up to nbuf chunks ahead of the host copies */
  for (size_t k = 0; k < (size_t)sg.nbuf && e == cudaSuccess; ++k) {
    size_t off = k * chunk, len = n - off < chunk ? n - off : chunk;
    e = cudaMemcpyAsync(sg.buf[k]->data, d + off, len, cudaMemcpyDeviceToHost, s->h);
    if (e == cudaSuccess && (e = cudaEventRecord(sg.ev[k], s->h)) != cudaSuccess) what = "cudaEventRecord";
  }
  for (size_t k = 0; k < nchunks && e == cudaSuccess; ++k) {
    int b = (int)(k % (size_t)sg.nbuf);
    size_t off = k * chunk, len = n - off < chunk ? n - off : chunk;
    if ((e = cudaEventSynchronize(sg.ev[b])) != cudaSuccess) {
      what = "cudaEventSynchronize";
      break;
    }
    fh__host_memcpy(h + off, sg.buf[b]->data, len);
    size_t nk = k + (size_t)sg.nbuf;
    if (nk < nchunks) {
      size_t noff = nk * chunk, nlen = n - noff < chunk ? n - noff : chunk;
      e = cudaMemcpyAsync(sg.buf[b]->data, d + noff, nlen, cudaMemcpyDeviceToHost, s->h);
      if (e == cudaSuccess && (e = cudaEventRecord(sg.ev[b], s->h)) != cudaSuccess) what = "cudaEventRecord";
    }
  }
  stage_close(&sg, s);
  if (e != cudaSuccess) return fh__cuda_fail(e, what);
  return FH_OK;
}

/* ---- helpers --------------------------------------------------------------------- */
static fh_status capture_refused(const char *why) {
  fh_error_set(FH_ERR_CAPTURE, "copy_: %s cannot be captured (it needs the host at capture time); %s", why,
               "use pinned host memory (pin_memory=true) and non_blocking=true inside a captured function");
  fh_error_set_stage("capture");
  return FH_ERR_CAPTURE;
}

/* A contiguous tensor of t's shape and dtype on `dev`. */
static fh_status empty_like_on(const fh_tensor *t, fh_device dev, bool pin, fh_tensor **out) {
  fh_tensor_options o = {(fh_dtype)t->dtype, dev, pin, false};
  return fh_tensor_empty(t->ndim, t->shape, &o, out);
}

static fh_status sync_stream(fh_stream *s) {
  fh_status st = fh__cuda_use_device(s->dev.index); /* the legacy stream is the current device's */
  if (st != FH_OK) return st;
  FH_CUDA_TRY(cudaStreamSynchronize(s->h), "cudaStreamSynchronize");
  return FH_OK;
}

/* ---- host to device --------------------------------------------------------------- */
static fh_status h2d(fh_tensor *dst, fh_tensor *src, fh_stream *s, bool non_blocking, bool capturing) {
  fh_status st;
  bool pinned = fh_tensor_is_pinned(src);
  if (capturing && !pinned) return capture_refused("a copy from pageable host memory");
  if (capturing && !non_blocking) return capture_refused("a blocking copy");
  if (capturing && !fh_tensor_is_contiguous(src)) return capture_refused("a copy from a non-contiguous host tensor");
  fh_tensor *hs = NULL, *dt = NULL;
  if ((st = fh_tensor_contiguous(src, &hs)) != FH_OK) return st; /* host gather; keeps pinning */
  if (fh_tensor_is_contiguous(dst)) {
    fh_tensor_retain(dst);
    dt = dst;
  } else if ((st = empty_like_on(dst, fh_tensor_device(dst), false, &dt)) != FH_OK) {
    fh_tensor_release(hs);
    return st;
  }
  size_t n = fh_tensor_nbytes(dst);
  /* recording makes the device current and guards both blocks */
  st = fh_storage_record_stream(dt->storage, s);
  if (st == FH_OK && fh_tensor_is_pinned(hs)) {
    st = fh_storage_record_stream(hs->storage, s);
    if (st == FH_OK) {
      cudaError_t e = cudaMemcpyAsync(fh_tensor_data(dt), fh_tensor_data(hs), n, cudaMemcpyHostToDevice, s->h);
      if (e != cudaSuccess) st = fh__cuda_fail(e, "cudaMemcpyAsync (host to device)");
    }
  } else if (st == FH_OK) {
    st = staged_h2d(fh_tensor_data(dt), fh_tensor_data(hs), n, s);
  }
  if (st == FH_OK && dt != dst) st = fh__copy_submit(dst, dt, s);
  if (st == FH_OK && !non_blocking) st = sync_stream(s);
  fh_tensor_release(hs);
  fh_tensor_release(dt);
  return st;
}

/* ---- device to host ---------------------------------------------------------------- */
static fh_status d2h(fh_tensor *dst, fh_tensor *src, fh_stream *s, bool non_blocking, bool capturing) {
  fh_status st;
  bool direct = fh_tensor_is_pinned(dst) && fh_tensor_is_contiguous(dst);
  if (capturing && !direct) return capture_refused("a copy into pageable or non-contiguous host memory");
  if (capturing && !non_blocking) return capture_refused("a blocking copy");
  fh_tensor *ds = NULL, *hd = NULL;
  if (fh_tensor_is_contiguous(src)) {
    fh_tensor_retain(src);
    ds = src;
  } else {
    if ((st = empty_like_on(src, fh_tensor_device(src), false, &ds)) != FH_OK) return st;
    if ((st = fh__copy_submit(ds, src, s)) != FH_OK) {
      fh_tensor_release(ds);
      return st;
    }
  }
  if (fh_tensor_is_contiguous(dst)) {
    fh_tensor_retain(dst);
    hd = dst;
  } else if ((st = empty_like_on(dst, fh_cpu(), false, &hd)) != FH_OK) {
    fh_tensor_release(ds);
    return st;
  }
  size_t n = fh_tensor_nbytes(dst);
  st = fh_storage_record_stream(ds->storage, s);
  if (st == FH_OK && fh_tensor_is_pinned(hd)) {
    st = fh_storage_record_stream(hd->storage, s);
    if (st == FH_OK) {
      cudaError_t e = cudaMemcpyAsync(fh_tensor_data(hd), fh_tensor_data(ds), n, cudaMemcpyDeviceToHost, s->h);
      if (e != cudaSuccess) st = fh__cuda_fail(e, "cudaMemcpyAsync (device to host)");
    }
    if (st == FH_OK && (!non_blocking || hd != dst)) st = sync_stream(s);
  } else if (st == FH_OK) {
    st = staged_d2h(fh_tensor_data(hd), fh_tensor_data(ds), n, s); /* complete on return */
  }
  if (st == FH_OK && hd != dst) st = fh_tensor_copy_(dst, hd, NULL, false); /* host scatter */
  fh_tensor_release(ds);
  fh_tensor_release(hd);
  return st;
}

/* ---- device to device (different devices) -------------------------------------------- */
static fh_status d2d(fh_tensor *dst, fh_tensor *src, fh_stream *s, bool non_blocking, bool capturing) {
  fh_status st;
  fh_device dd = fh_tensor_device(dst), sd = fh_tensor_device(src);
  fh_stream *ss = NULL;
  if ((st = fh_stream_current(sd, &ss)) != FH_OK) return st;
  if (capturing && !non_blocking) return capture_refused("a blocking copy");
  fh_tensor *cs = NULL, *dt = NULL;
  if (fh_tensor_is_contiguous(src)) {
    fh_tensor_retain(src);
    cs = src;
  } else {
    if ((st = empty_like_on(src, sd, false, &cs)) != FH_OK) return st;
    if ((st = fh__copy_submit(cs, src, ss)) != FH_OK) {
      fh_tensor_release(cs);
      return st;
    }
  }
  if (fh_tensor_is_contiguous(dst)) {
    fh_tensor_retain(dst);
    dt = dst;
  } else if ((st = empty_like_on(dst, dd, false, &dt)) != FH_OK) {
    fh_tensor_release(cs);
    return st;
  }
  /* the copy runs on s (destination side) after the source side's work */
  st = fh_stream_wait_stream(s, ss);
  if (st == FH_OK) st = fh_storage_record_stream(cs->storage, s);
  if (st == FH_OK) st = fh_storage_record_stream(dt->storage, s);
  if (st == FH_OK) {
    cudaError_t e = cudaMemcpyPeerAsync(fh_tensor_data(dt), dd.index, fh_tensor_data(cs), sd.index,
                                        fh_tensor_nbytes(dst), s->h);
    if (e != cudaSuccess) st = fh__cuda_fail(e, "cudaMemcpyPeerAsync");
  }
  if (st == FH_OK && dt != dst) st = fh__copy_submit(dst, dt, s);
  if (st == FH_OK && !non_blocking) st = sync_stream(s);
  fh_tensor_release(cs);
  fh_tensor_release(dt);
  return st;
}

fh_status fh__cuda_copy_across(fh_tensor *dst, fh_tensor *src, fh_stream *stream, bool non_blocking) {
  fh_device dd = fh_tensor_device(dst), sd = fh_tensor_device(src);
  fh_device cuda_side = dd.type == FH_DEVICE_CUDA ? dd : sd;
  fh_stream *s = NULL;
  fh_status st = fh__op_stream(cuda_side, stream, &s);
  if (st != FH_OK) {
    if (dd.type == FH_DEVICE_CUDA && sd.type == FH_DEVICE_CUDA) fh_error_prefix("copy_ (runs on the destination's stream)");
    else fh_error_prefix("copy_");
    return st;
  }
  if (fh_tensor_numel(dst) == 0) return FH_OK;
  bool capturing = fh_launch_capturing(cuda_side);
  if (dd.type == FH_DEVICE_CUDA && sd.type == FH_DEVICE_CUDA) return d2d(dst, src, s, non_blocking, capturing);
  if (dd.type == FH_DEVICE_CUDA) return h2d(dst, src, s, non_blocking, capturing);
  return d2h(dst, src, s, non_blocking, capturing);
}
