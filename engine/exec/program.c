/* Programs: CUDA graph and host graph capture and replay (fh/program.h). */
#include "fh/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fh/cuda_alloc.h"
#include "fh/internal.h"
#include "fh/trace.h"

enum { ST_NEW = 0, ST_CAPTURING, ST_CAPTURED, ST_READY, ST_FAILED };

/* An open-addressing set of retained storages (the capture's uses). */
typedef struct kept_set {
  fh_storage **slot;
  size_t cap, n;
  size_t bytes;
} kept_set;

struct fh_program {
  fh_refcount rc;
  fh_program_kind kind;
  fh_device dev;
  int state;
  bool closed;
  fh_buffer *inputs; /* one reference */
  /* CUDA */
  fh_stream *side; /* one reference */
  fh_mempool *pool;
  fh__graph *graph;
  fh_stream *prev_current; /* current stream before the capture (one reference) */
  fh_stream **forks;       /* other streams used during the capture (one reference each) */
  int nforks, capforks;
  kept_set kept;
  bool observe_failed;
  /* host */
  fh_tape *tape;
  /* replays */
  fh_event *replay_event; /* one reference; recorded after each launch */
  fh_stream *replay_stream; /* one reference */
  fh_copy_handle *latest;   /* one reference: the last copy_inputs handle */
  bool outstanding;         /* `latest` has not been replayed yet */
  uint64_t replays, nodes;
  uint64_t id; /* unique per process, for printing and traces */
  fh_program *next_parked;
};

static atomic_uint_fast64_t g_program_ids;
static fh_program *g_parked; /* dropped programs with launches in flight */

/* ---- kept storages --------------------------------------------------------------- */
static size_t ptr_hash(const void *p, size_t cap) {
  uintptr_t x = (uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x & (cap - 1);
}

static bool kept_add(kept_set *k, fh_storage *s) {
  if (k->cap == 0 || 2 * (k->n + 1) > k->cap) {
    size_t cap = k->cap ? 2 * k->cap : 256;
    fh_storage **slot = fh_calloc(cap, sizeof *slot);
    if (slot == NULL) return false;
    for (size_t i = 0; i < k->cap; ++i)
      if (k->slot[i]) {
        size_t j = ptr_hash(k->slot[i], cap);
        while (slot[j]) j = (j + 1) & (cap - 1);
        slot[j] = k->slot[i];
      }
    fh_free(k->slot);
    k->slot = slot;
    k->cap = cap;
  }
  size_t j = ptr_hash(s, k->cap);
  while (k->slot[j]) {
    if (k->slot[j] == s) return true;
    j = (j + 1) & (k->cap - 1);
  }
  fh_storage_retain(s);
  k->slot[j] = s;
  k->n++;
  k->bytes += s->nbytes;
  return true;
}

static void kept_clear(kept_set *k) {
  for (size_t i = 0; i < k->cap; ++i)
    if (k->slot[i]) fh_storage_release(k->slot[i]);
  fh_free(k->slot);
  memset(k, 0, sizeof *k);
}

/* The storage use observer during a CUDA capture: keep every storage used
 * on a stream of the capture device, remember the streams. */
static void observe_use(void *ctx, fh_storage *s, fh_stream *stream) {
  fh_program *p = ctx;
  if (!fh_device_eq(fh_stream_device(stream), p->dev)) return;
  if (!kept_add(&p->kept, s)) p->observe_failed = true;
  if (stream == p->side) return;
  for (int i = 0; i < p->nforks; ++i)
    if (p->forks[i] == stream) return;
  if (p->nforks == p->capforks) {
    int cap = p->capforks ? 2 * p->capforks : 4;
    fh_stream **f = fh_realloc(p->forks, sizeof *f * (size_t)cap);
    if (f == NULL) {
      p->observe_failed = true;
      return;
    }
    p->forks = f;
    p->capforks = cap;
  }
  fh_stream_retain(stream);
  p->forks[p->nforks++] = stream;
}

/* ---- life cycle --------------------------------------------------------------------- */
fh_status fh_program_new(fh_program_kind kind, fh_buffer *inputs, fh_program **out) {
  char dn[FH_DEVICE_NAME_MAX];
  fh_device dev = fh_buffer_device(inputs);
  fh_status st = fh_buffer_check_open(inputs, "program inputs");
  if (st != FH_OK) return st;
  if (kind == FH_PROGRAM_CUDA_GRAPH && dev.type != FH_DEVICE_CUDA)
    return fh_error_set(FH_ERR_VALUE, "a CUDA graph program needs inputs on one CUDA device, got %s",
                        fh_device_name(dev, dn));
  if (kind == FH_PROGRAM_HOST_GRAPH && dev.type != FH_DEVICE_CPU)
    return fh_error_set(FH_ERR_VALUE, "a host graph program needs inputs on the cpu, got %s", fh_device_name(dev, dn));
  fh_exec_sweep();
  fh_program *p = fh_calloc(1, sizeof *p);
  if (p == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory creating a program");
  fh_rc_init(&p->rc);
  p->kind = kind;
  p->dev = dev;
  p->id = atomic_fetch_add(&g_program_ids, 1) + 1;
  if (kind == FH_PROGRAM_CUDA_GRAPH) {
    st = fh_stream_new(dev, 0, &p->side);
    if (st == FH_OK) st = fh_mempool_new(dev, &p->pool);
    if (st == FH_OK) st = fh_event_new(false, &p->replay_event);
  } else {
    st = fh_tape_new(&p->tape);
  }
  if (st != FH_OK) {
    /* releasing the stream and the pool may clear the thread's error record
     * (the allocator's stream-retirement path): keep the error */
    fh_error_saved err;
    fh_error_save(&err);
    if (p->side) fh_stream_release(p->side);
    if (p->pool) fh_mempool_free(p->pool);
    if (p->tape) fh_tape_free(p->tape);
    fh_free(p);
    fh_error_restore(&err);
    return st;
  }
  fh_buffer_retain(inputs);
  p->inputs = inputs;
  *out = p;
  return FH_OK;
}

void fh_program_retain(fh_program *p) { fh_rc_retain(&p->rc); }

static void destroy(fh_program *p) {
  if (p->inputs) fh_buffer_release(p->inputs);
  if (p->replay_event) fh_event_release(p->replay_event);
  if (p->replay_stream) fh_stream_release(p->replay_stream);
  if (p->latest) fh_copy_handle_release(p->latest);
  if (p->prev_current) fh_stream_release(p->prev_current);
  for (int i = 0; i < p->nforks; ++i) fh_stream_release(p->forks[i]);
  fh_free(p->forks);
  if (p->side) fh_stream_release(p->side);
  fh_free(p);
}

/* Release what the replays use; every launch and copy has completed. */
static void teardown(fh_program *p) {
  if (p->graph) fh__graph_free(p->graph);
  p->graph = NULL;
  kept_clear(&p->kept);
  if (p->tape) fh_tape_free(p->tape);
  p->tape = NULL;
  if (p->pool) fh_mempool_free(p->pool);
  p->pool = NULL;
  if (p->inputs) {
    (void)fh_buffer_close(p->inputs);
    fh_buffer_release(p->inputs);
    p->inputs = NULL;
  }
  if (p->latest) fh_copy_handle_release(p->latest);
  p->latest = NULL;
  p->outstanding = false;
  p->closed = true;
  fh_error_clear();
}

/* True when no launch of p can still be running (never blocks). */
static bool launches_done(fh_program *p) {
  if (p->replay_stream == NULL) return true;
  bool done = false;
  if (fh_event_query(p->replay_event, &done) != FH_OK) {
    fh_error_clear();
    return false;
  }
  return done;
}

void fh_exec_sweep(void) {
  if (fh_exec_capturing()) return;
  fh_program **pp = &g_parked;
  while (*pp) {
    fh_program *p = *pp;
    if (launches_done(p)) {
      *pp = p->next_parked;
      teardown(p);
      destroy(p);
    } else {
      pp = &p->next_parked;
    }
  }
}

void fh_program_release(fh_program *p) {
  if (p == NULL || !fh_rc_release(&p->rc)) return;
  if (p->closed) {
    destroy(p);
    return;
  }
  /* the GC path: never block, never query while a capture runs */
  if (!fh_exec_capturing() && launches_done(p)) {
    teardown(p);
    destroy(p);
    return;
  }
  p->next_parked = g_parked;
  g_parked = p;
}

fh_program_kind fh_program_get_kind(const fh_program *p) { return p->kind; }
fh_device fh_program_device(const fh_program *p) { return p->dev; }
uint64_t fh_program_id(const fh_program *p) { return p->id; }
bool fh_program_pending(fh_program *p) { return !launches_done(p); }
fh_buffer *fh_program_inputs(const fh_program *p) { return p->inputs; }
fh_stream *fh_program_side_stream(const fh_program *p) { return p->side; }
bool fh_program_is_closed(const fh_program *p) { return p->closed; }
fh_stream *fh_program_replay_stream(const fh_program *p) { return p->replay_stream; }
fh_event *fh_program_replay_event(const fh_program *p) { return p->replay_stream ? p->replay_event : NULL; }

fh_status fh_program_check_open(const fh_program *p, const char *what) {
  if (!p->closed) return FH_OK;
  return fh_error_set(FH_ERR_EXECUTION, "%s: the program is closed", what);
}

/* ---- capture ------------------------------------------------------------------------- */
fh_status fh_program_capture_begin(fh_program *p) {
  fh_status st = fh_program_check_open(p, "capture");
  if (st != FH_OK) return st;
  if (p->state != ST_NEW) return fh_error_set(FH_ERR_EXECUTION, "capture: a program captures only once");
  if (fh_exec_capturing() || fh_tape_active() != NULL)
    return fh_error_set(FH_ERR_EXECUTION,
                        "capture: another capture is running on this thread (captures do not nest: a captured "
                        "function cannot capture a program)");
  if (p->kind == FH_PROGRAM_HOST_GRAPH) {
    if ((st = fh_tape_begin(p->tape)) != FH_OK) return st;
  } else {
    fh_stream *cur = NULL;
    if ((st = fh_stream_current(p->dev, &cur)) != FH_OK) return st;
    if ((st = fh_mempool_begin(p->pool)) != FH_OK) return st;
    if ((st = fh__graph_begin(p->side)) != FH_OK) {
      (void)fh_mempool_end(p->pool);
      return st;
    }
    fh_stream_retain(cur);
    p->prev_current = cur;
    fh_stream_set_current(p->side);
    p->observe_failed = false;
    fh__storage_observe_uses(observe_use, p);
  }
  fh__exec_set_capturing(true);
  p->state = ST_CAPTURING;
  return FH_OK;
}

fh_status fh_program_capture_end(fh_program *p, bool keep) {
  if (p->state != ST_CAPTURING) return fh_error_set(FH_ERR_EXECUTION, "capture_end: the program is not capturing");
  fh__exec_set_capturing(false);
  fh_status st = FH_OK;
  if (p->kind == FH_PROGRAM_HOST_GRAPH) {
    fh_tape_end(p->tape);
  } else {
    fh__storage_observe_uses(NULL, NULL);
    fh_stream_set_current(p->prev_current);
    fh_stream_release(p->prev_current);
    p->prev_current = NULL;
    fh__graph *g = NULL;
    st = fh__graph_end(p->side, p->forks, p->nforks, keep, &g);
    char msg[FH_ERROR_MESSAGE_MAX];
    fh_status keep_st = fh_error_status();
    snprintf(msg, sizeof msg, "%s", fh_error_message());
    fh_status pst = fh_mempool_end(p->pool);
    if (st != FH_OK) {
      fh_error_set(keep_st, "%s", msg);
      fh_error_set_stage("capture");
    } else if (pst != FH_OK) {
      st = pst;
    }
    if (st == FH_OK && keep && p->observe_failed)
      st = fh_error_set(FH_ERR_MEMORY, "out of memory recording the storages used during the capture");
    if (st != FH_OK || !keep) {
      if (g) fh__graph_free(g);
      g = NULL;
    }
    p->graph = g;
  }
  p->state = st == FH_OK && keep ? ST_CAPTURED : ST_FAILED;
  return keep ? st : FH_OK;
}

fh_status fh_program_instantiate(fh_program *p) {
  if (p->state != ST_CAPTURED) return fh_error_set(FH_ERR_EXECUTION, "instantiate: nothing was captured");
  fh_status st = FH_OK;
  if (p->kind == FH_PROGRAM_CUDA_GRAPH) {
    st = fh__graph_instantiate(p->graph, &p->nodes);
    if (st != FH_OK) {
      fh_error_prefix("instantiating the captured graph");
      fh_error_set_stage("capture");
      p->state = ST_FAILED;
      return st;
    }
  } else {
    p->nodes = fh_tape_length(p->tape);
  }
  p->state = ST_READY;
  return FH_OK;
}

/* ---- replays ------------------------------------------------------------------------ */
static fh_status check_ready(fh_program *p, const char *what) {
  fh_status st = fh_program_check_open(p, what);
  if (st != FH_OK) return st;
  if ((st = fh_exec_refuse_in_capture(what, "replays and their input copies run between captures")) != FH_OK)
    return st;
  if (p->state != ST_READY) return fh_error_set(FH_ERR_EXECUTION, "%s: the program was not captured", what);
  fh_exec_sweep();
  return FH_OK;
}

static _Thread_local int tl_fail_launches;
void fh__program_fail_next_launches(int n) { tl_fail_launches = n; }

static void trace_replay_end(const fh_program *p, int tr, uint64_t replay) {
  if (tr == FH_TRACE_SKIP) return;
  char d[96];
  snprintf(d, sizeof d, "program %llu, replay %llu", (unsigned long long)p->id, (unsigned long long)replay);
  fh__trace_end(tr, 0, (int64_t)p->nodes, d);
}

/* Launch on `s` after the previous launch; record the replay event. */
static fh_status launch_on(fh_program *p, fh_stream *s) {
  fh_status st;
  if (tl_fail_launches > 0) {
    tl_fail_launches--;
    return fh_error_set(FH_ERR_EXECUTION, "launch failed (failure injected by a test)");
  }
  if (p->kind == FH_PROGRAM_HOST_GRAPH) {
    int tr = fh__trace_on ? fh__trace_begin(FH_TRACE_REPLAY, "HostGraphProgram replay", p->dev, NULL) : FH_TRACE_SKIP;
    st = fh_tape_replay(p->tape);
    trace_replay_end(p, tr, p->replays + 1);
    if (st == FH_OK) p->replays++;
    return st;
  }
  if (p->replay_stream != NULL && p->replay_stream != s && (st = fh_stream_wait_event(s, p->replay_event)) != FH_OK)
    return st;
  /* traced after the wait: the bar is the graph */
  int tr = fh__trace_on ? fh__trace_begin(FH_TRACE_REPLAY, "CudaGraphProgram replay", p->dev, s) : FH_TRACE_SKIP;
  st = fh__graph_launch(p->graph, s);
  trace_replay_end(p, tr, p->replays + 1);
  if (st != FH_OK) return st;
  if ((st = fh_event_record(p->replay_event, s)) != FH_OK) return st;
  if (p->replay_stream != s) {
    fh_stream_retain(s);
    if (p->replay_stream) fh_stream_release(p->replay_stream);
    p->replay_stream = s;
  }
  p->replays++;
  return FH_OK;
}

static fh_status replay_stream_of(fh_program *p, fh_stream **s) {
  if (p->kind == FH_PROGRAM_HOST_GRAPH) {
    *s = NULL;
    return FH_OK;
  }
  return fh_stream_current(p->dev, s);
}

static fh_status finish(fh_program *p, fh_stream *s, bool synchronize) {
  if (!synchronize || s == NULL) return FH_OK;
  return fh_event_synchronize(p->replay_event);
}

fh_status fh_program_launch(fh_program *p, bool synchronize) {
  fh_status st = check_ready(p, "replay");
  fh_stream *s = NULL;
  if (st == FH_OK) st = replay_stream_of(p, &s);
  if (st == FH_OK) st = launch_on(p, s);
  if (st == FH_OK) st = finish(p, s, synchronize);
  return st;
}

fh_status fh_program_replay(fh_program *p, fh_tensor *const *src, bool synchronize, const char *what) {
  const char *fn = what ? what : "replay";
  fh_status st = check_ready(p, fn);
  fh_stream *s = NULL;
  if (st == FH_OK) st = replay_stream_of(p, &s);
  if (st != FH_OK) return st;
  fh_event *wait = p->replay_stream != NULL && p->replay_stream != s ? p->replay_event : NULL;
  /* no handle: the launch below follows the copy on `s`, and the replay
   * event recorded after the launch covers both */
  if ((st = fh__buffer_copy_ordered(p->inputs, src, s, wait, fn)) != FH_OK) return st;
  /* the copy replaced the payload any outstanding handle prepared */
  p->outstanding = false;
  if ((st = launch_on(p, s)) != FH_OK) return st;
  return finish(p, s, synchronize);
}

fh_status fh_program_copy_inputs(fh_program *p, fh_tensor *const *src, fh_stream *stream, bool non_blocking,
                                 fh_event *const *wait, int nwait, fh_copy_handle **out, const char *what) {
  const char *fn = what ? what : "copy_inputs_from";
  fh_status st = check_ready(p, fn);
  if (st != FH_OK) return st;
  fh_event *small[8];
  fh_event **all = small;
  if (nwait + 1 > 8 && (all = fh_malloc(sizeof *all * (size_t)(nwait + 1))) == NULL)
    return fh_error_set(FH_ERR_MEMORY, "out of memory ordering a copy");
  for (int i = 0; i < nwait; ++i) all[i] = wait[i];
  /* the previous launch reads the inputs: copy after it */
  all[nwait] = fh_program_replay_event(p);
  fh_copy_handle *h = NULL;
  st = fh__buffer_copy_from_named(p->inputs, src, stream, non_blocking, all, nwait + 1, &h, "copy_inputs_from");
  if (all != small) fh_free(all);
  if (st != FH_OK) {
    fh_error_prefix("%s", fn);
    return st;
  }
  if (p->latest) fh_copy_handle_release(p->latest);
  fh_copy_handle_retain(h);
  p->latest = h;
  p->outstanding = true;
  *out = h;
  return FH_OK;
}

#define LATEST_HINT "pass the latest CopyHandle returned by this program's copy_inputs_from"

fh_status fh_program_replay_prepared(fh_program *p, fh_copy_handle *h, fh_stream *stream, bool synchronize,
                                     const char *what) {
  const char *fn = what ? what : "replay_prepared";
  fh_status st = check_ready(p, fn);
  if (st != FH_OK) return st;
  fh_stream *s = NULL;
  if (stream != NULL) {
    if (p->kind == FH_PROGRAM_HOST_GRAPH)
      return fh_error_set(FH_ERR_VALUE, "%s: option 'stream': a HostGraphProgram replays on the host, in order; there "
                                        "is no stream to launch on", fn);
    if ((st = fh__op_stream(p->dev, stream, &s)) != FH_OK) {
      fh_error_prefix("%s: option 'stream'", fn);
      return st;
    }
  } else if ((st = replay_stream_of(p, &s)) != FH_OK) {
    return st;
  }
  if (h == NULL) {
    if (p->outstanding)
      return fh_error_set(FH_ERR_GRAPH_INPUT,
                          "%s: copy_inputs_from prepared inputs that have not been replayed; %s as copy_handle "
                          "(the latest CopyHandle orders this launch after its copy)",
                          fn, LATEST_HINT);
  } else if (fh_copy_handle_owner(h) != fh_buffer_id(p->inputs)) {
    return fh_error_set(FH_ERR_GRAPH_INPUT, "%s: copy_handle is not a CopyHandle of this program (foreign); %s", fn,
                        LATEST_HINT);
  } else if (h != p->latest || !p->outstanding) {
    return fh_error_set(FH_ERR_GRAPH_INPUT,
                        "%s: copy_handle is stale: it is not the latest CopyHandle of this program, or it was "
                        "already replayed, or replay() copied newer inputs since; %s",
                        fn, LATEST_HINT);
  }
  if (h != NULL && s != NULL && fh_copy_handle_stream(h) != s) {
    if ((st = fh_copy_handle_wait_on(h, s)) != FH_OK) return st;
  }
  if ((st = launch_on(p, s)) != FH_OK) return st;
  if (h != NULL) p->outstanding = false;
  return finish(p, s, synchronize);
}

fh_status fh_program_synchronize(fh_program *p) {
  if (p->replay_stream == NULL) return FH_OK;
  return fh_event_synchronize(p->replay_event);
}

fh_status fh_program_note_reads(fh_program *p, fh_stream *s) {
  if (p->replay_stream == NULL || s != p->replay_stream) return FH_OK;
  return fh_event_record(p->replay_event, s);
}

fh_status fh_program_close(fh_program *p) {
  if (p->closed) return FH_OK;
  if (p->state == ST_CAPTURING)
    return fh_error_set(FH_ERR_EXECUTION, "close: the program is capturing (close it after capture returns)");
  fh_status st = FH_OK;
  if (p->inputs) st = fh_buffer_close(p->inputs); /* waits for pending copies */
  if (st == FH_OK) st = fh_program_synchronize(p);
  if (st != FH_OK) {
    /* a broken context runs nothing it queued again: nothing can still read
     * the program's memory, so it is released all the same */
    if (!fh__device_is_broken(p->dev)) return st;
    fh_error_clear();
  }
  teardown(p);
  return FH_OK;
}

void fh_program_get_stats(const fh_program *p, fh_program_stats *out) {
  memset(out, 0, sizeof *out);
  out->replays = p->replays;
  out->node_count = p->nodes;
  if (p->kind == FH_PROGRAM_HOST_GRAPH) {
    out->memory_allocated = p->tape ? fh_tape_kept_bytes(p->tape) : 0;
    out->memory_reserved = out->memory_allocated;
    return;
  }
  out->memory_allocated = p->kept.bytes;
  uint64_t blocks = 0;
  if (p->pool) fh_mempool_usage(p->pool, &out->memory_reserved, &blocks);
}
