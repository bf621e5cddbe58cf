/* Tracing (fh/trace.h): records of copies, replays, eager launch groups,
 * host synchronizations and device waits of the traced thread, timed by
 * CUDA events on streams and by the host clock elsewhere, written as
 * Chrome trace-event JSON with Jansson.
 *
 * State is process-wide and touched only by the traced thread (the owner):
 * hooks on other threads return at once. While the trace itself calls the
 * runtime (recording or reading its events) `busy` makes the hooks return,
 * so the trace never records its own work. */
#include "fh/trace.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fh/launch.h"

bool fh__trace_on;

#define MAX_GROUP_KERNELS 8
#define MAX_DEVICES 64

typedef struct rec {
  uint8_t kind;
  bool cuda;  /* timed by events */
  bool valid; /* false: dropped (an event could not be recorded) */
  int track;
  int dev;                /* CUDA ordinal of the time base */
  double t0, t1;          /* host us since start (host timing), resolved at stop otherwise */
  fh_event *e0, *e1;      /* CUDA timing events (one reference each) */
  fh_stream *stream;      /* borrowed, between begin and end only */
  uint64_t bytes;
  int64_t count;
  int nkernels;
  int32_t kernels[MAX_GROUP_KERNELS], kcount[MAX_GROUP_KERNELS];
  char name[64];
  char detail[160];
} rec;

static struct {
  pthread_t owner;
  double host0; /* host clock at the start, us */
  rec *recs;
  size_t n, cap;
  uint64_t dropped;
  fh_trace_track *tracks;
  int ntracks, captracks;
  fh_event *base[MAX_DEVICES]; /* recorded and completed at start */
  double base_us[MAX_DEVICES]; /* host us (since start) when base[d] was seen complete */
  int depth;
  long group;        /* open launch group (record index) or -1 */
  double group_last; /* host us of the open group's last launch */
  bool busy;
} T = {.group = -1};

struct fh_trace {
  fh_trace_event *events;
  size_t n;
  fh_trace_track *tracks;
  int ntracks;
  double duration;
  uint64_t dropped;
};

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

const char *fh_trace_kind_name(fh_trace_kind k) {
  static const char *const names[FH_TRACE_KINDS] = {"copy", "replay", "launches", "sync", "wait"};
  return k >= 0 && k < FH_TRACE_KINDS ? names[k] : "?";
}

bool fh_trace_active(void) { return fh__trace_on; }

/* ---- the caller's error record survives the trace's own calls ---------------- */
typedef struct saved_error {
  fh_status st;
  char msg[FH_ERROR_MESSAGE_MAX], path[512], stage[32];
} saved_error;

static void err_save(saved_error *e) {
  e->st = fh_error_status();
  if (e->st == FH_OK) return;
  snprintf(e->msg, sizeof e->msg, "%s", fh_error_message());
  snprintf(e->path, sizeof e->path, "%s", fh_error_path());
  snprintf(e->stage, sizeof e->stage, "%s", fh_error_stage());
}

static void err_restore(const saved_error *e) {
  if (e->st == FH_OK) {
    fh_error_clear();
    return;
  }
  fh_error_set(e->st, "%s", e->msg);
  if (e->path[0]) fh_error_set_path(e->path);
  if (e->stage[0]) fh_error_set_stage(e->stage);
}

/* ---- tracks ------------------------------------------------------------------ */
static int track_of(fh_device dev, fh_stream *s) {
  uint64_t id = s ? fh_stream_id(s) : 0;
  if (s == NULL) dev = fh_cpu();
  for (int i = 0; i < T.ntracks; ++i)
    if (T.tracks[i].stream_id == id && fh_device_eq(T.tracks[i].device, dev)) {
      /* a name given after the first record still shows */
      if (s && T.tracks[i].name[0] == 0) snprintf(T.tracks[i].name, sizeof T.tracks[i].name, "%s", fh_stream_name(s));
      return i;
    }
  if (T.ntracks == T.captracks) {
    int cap = T.captracks ? 2 * T.captracks : 8;
    fh_trace_track *t = fh_realloc(T.tracks, sizeof *t * (size_t)cap);
    if (t == NULL) return -1;
    T.tracks = t;
    T.captracks = cap;
  }
  fh_trace_track *t = &T.tracks[T.ntracks];
  memset(t, 0, sizeof *t);
  t->device = dev;
  t->stream_id = id;
  if (s) {
    t->priority = fh_stream_priority(s);
    t->is_default = fh_stream_is_default(s);
    snprintf(t->name, sizeof t->name, "%s", fh_stream_name(s));
  }
  return T.ntracks++;
}

const char *fh_trace_track_label(const fh_trace_track *tr, char *buf, size_t size) {
  if (tr->stream_id == 0) snprintf(buf, size, "host");
  else if (tr->is_default) snprintf(buf, size, "default stream");
  else if (tr->name[0]) snprintf(buf, size, "stream %llu (%s)", (unsigned long long)tr->stream_id, tr->name);
  else snprintf(buf, size, "stream %llu", (unsigned long long)tr->stream_id);
  return buf;
}

/* ---- records ------------------------------------------------------------------- */
static bool mine(void) { return pthread_equal(pthread_self(), T.owner) && !T.busy; }

static bool blocked(void) { return fh_tape_active() != NULL || fh__cuda_any_capture(); }

/* Record `e` on `s`; false (error record untouched) when that fails. */
static bool record_on(fh_event **e, fh_stream *s) {
  saved_error se;
  err_save(&se);
  T.busy = true;
  fh_status st = *e ? FH_OK : fh_event_new(true, e);
  if (st == FH_OK) st = fh_event_record(*e, s);
  T.busy = false;
  err_restore(&se);
  return st == FH_OK;
}

/* A new record on the track of (dev, s); NULL when full or out of memory. */
static rec *new_rec(fh_trace_kind kind, const char *name, fh_device dev, fh_stream *s) {
  if (T.n >= FH_TRACE_MAX_EVENTS) {
    T.dropped++;
    return NULL;
  }
  if (T.n == T.cap) {
    size_t cap = T.cap ? 2 * T.cap : 256;
    rec *r = fh_realloc(T.recs, sizeof *r * cap);
    if (r == NULL) {
      T.dropped++;
      return NULL;
    }
    T.recs = r;
    T.cap = cap;
  }
  bool cuda = s != NULL && dev.type == FH_DEVICE_CUDA && dev.index >= 0 && dev.index < MAX_DEVICES &&
              T.base[dev.index] != NULL;
  int track = track_of(cuda ? dev : fh_cpu(), cuda ? s : NULL);
  if (track < 0) {
    T.dropped++;
    return NULL;
  }
  rec *r = &T.recs[T.n];
  memset(r, 0, sizeof *r);
  r->kind = (uint8_t)kind;
  r->cuda = cuda;
  r->valid = true;
  r->track = track;
  r->dev = cuda ? dev.index : -1;
  r->stream = cuda ? s : NULL;
  snprintf(r->name, sizeof r->name, "%s", name ? name : fh_trace_kind_name(kind));
  T.n++;
  return r;
}

static void drop_last_if_invalid(rec *r) {
  if (r->valid) return;
  if (r->e0) fh_event_release(r->e0);
  if (r->e1) fh_event_release(r->e1);
  r->e0 = r->e1 = NULL;
  T.dropped++;
}

int fh__trace_begin(fh_trace_kind kind, const char *name, fh_device dev, fh_stream *s) {
  if (!fh__trace_on || !mine() || blocked()) return FH_TRACE_SKIP;
  if (T.depth++ > 0) return FH_TRACE_NESTED;
  T.group = -1;
  rec *r = new_rec(kind, name, dev, s);
  if (r == NULL) return FH_TRACE_NESTED;
  if (r->cuda) {
    if (!record_on(&r->e0, s)) r->valid = false;
  } else {
    r->t0 = now_us() - T.host0;
  }
  return (int)(r - T.recs);
}

void fh__trace_end(int token, uint64_t bytes, int64_t count, const char *detail) {
  if (token == FH_TRACE_SKIP) return;
  if (T.depth > 0) T.depth--;
  if (token < 0 || (size_t)token >= T.n) return;
  rec *r = &T.recs[token];
  r->bytes = bytes;
  r->count = count;
  if (detail) snprintf(r->detail, sizeof r->detail, "%s", detail);
  if (r->valid && r->cuda) {
    if (!record_on(&r->e1, r->stream)) r->valid = false;
  } else {
    r->t1 = now_us() - T.host0;
  }
  r->stream = NULL;
  drop_last_if_invalid(r);
}

void fh__trace_wait(fh_stream *s, const char *detail) {
  if (!fh__trace_on || !mine() || blocked() || T.depth > 0 || s == NULL) return;
  T.group = -1;
  rec *r = new_rec(FH_TRACE_WAIT, "wait", fh_stream_device(s), s);
  if (r == NULL) return;
  if (detail) snprintf(r->detail, sizeof r->detail, "%s", detail);
  if (r->cuda) {
    if (!record_on(&r->e0, s)) r->valid = false;
  } else {
    r->t0 = r->t1 = now_us() - T.host0;
  }
  r->stream = NULL;
  drop_last_if_invalid(r);
}

const char *fh__trace_direction(char *buf, size_t size, fh_device src, bool src_pinned, fh_device dst,
                                bool dst_pinned) {
  char a[FH_DEVICE_NAME_MAX], b[FH_DEVICE_NAME_MAX];
  snprintf(buf, size, "%s%s -> %s%s", fh_device_name(src, a),
           src.type == FH_DEVICE_CPU ? (src_pinned ? " (pinned)" : " (pageable)") : "", fh_device_name(dst, b),
           dst.type == FH_DEVICE_CPU ? (dst_pinned ? " (pinned)" : " (pageable)") : "");
  return buf;
}

/* ---- launch groups (called by fh_launch_submit while tracing) ----------------------- */
fh_status fh__trace_submit(const fh_launch *l, fh_status (*run)(const fh_launch *)) {
  bool cpu = l->device.type == FH_DEVICE_CPU;
  if (!mine() || T.depth > 0 || blocked() || (!cpu && l->stream == NULL)) return run(l);
  double t = now_us() - T.host0;
  rec *g = T.group >= 0 ? &T.recs[T.group] : NULL;
  fh_stream *s = cpu ? NULL : l->stream;
  if (g != NULL) {
    int track = track_of(cpu ? fh_cpu() : l->device, s);
    if (track != g->track || t - T.group_last > FH_TRACE_GROUP_GAP_US) g = NULL;
  }
  if (g == NULL) {
    T.group = -1;
    g = new_rec(FH_TRACE_LAUNCHES, NULL, l->device, s);
    if (g != NULL) {
      if (g->cuda) {
        if (!record_on(&g->e0, s)) g->valid = false;
      } else {
        g->t0 = t;
      }
      if (g->valid) T.group = (long)(g - T.recs);
      else drop_last_if_invalid(g);
    }
  }
  long gi = g != NULL ? (long)(g - T.recs) : -1;
  fh_status st = run(l);
  g = gi >= 0 ? &T.recs[gi] : NULL; /* (the records never move during a launch, but do not rely on it) */
  if (g != NULL && g->valid) {
    g->count++;
    int k = 0;
    while (k < g->nkernels && g->kernels[k] != l->kernel) ++k;
    if (k < g->nkernels) {
      g->kcount[k]++;
    } else if (k < MAX_GROUP_KERNELS) {
      g->kernels[k] = l->kernel;
      g->kcount[k] = 1;
      g->nkernels++;
    }
    if (g->cuda) {
      /* re-recorded after every launch: the last record is the group's end */
      if (!record_on(&g->e1, s)) {
        g->valid = false;
        drop_last_if_invalid(g);
        T.group = -1;
      }
    } else {
      g->t1 = now_us() - T.host0;
    }
  }
  T.group_last = now_us() - T.host0;
  return st;
}

/* ---- start / stop -------------------------------------------------------------------- */
static void release_recs(void) {
  for (size_t i = 0; i < T.n; ++i) {
    if (T.recs[i].e0) fh_event_release(T.recs[i].e0);
    if (T.recs[i].e1) fh_event_release(T.recs[i].e1);
  }
  fh_free(T.recs);
  T.recs = NULL;
  T.n = T.cap = 0;
  fh_free(T.tracks);
  T.tracks = NULL;
  T.ntracks = T.captracks = 0;
  for (int d = 0; d < MAX_DEVICES; ++d) {
    if (T.base[d]) fh_event_release(T.base[d]);
    T.base[d] = NULL;
  }
}

fh_status fh_trace_start(void) {
  if (fh__trace_on) return fh_error_set(FH_ERR_STATE, "a trace is already running (stop it first)");
  release_recs();
  T.owner = pthread_self();
  T.dropped = 0;
  T.depth = 0;
  T.group = -1;
  T.host0 = now_us();
  int n = fh_cuda_device_count();
  if (n > MAX_DEVICES) n = MAX_DEVICES;
  for (int d = 0; d < n; ++d) {
    /* the time base: an event on the default stream, complete before any
     * traced work is submitted, so every traced event comes after it */
    fh_device dev = {FH_DEVICE_CUDA, d};
    fh_stream *s = NULL;
    fh_status st = fh_stream_default(dev, &s);
    if (st == FH_OK) st = fh_event_new(true, &T.base[d]);
    if (st == FH_OK) st = fh_event_record(T.base[d], s);
    if (st == FH_OK) st = fh_event_synchronize(T.base[d]);
    if (st != FH_OK) {
      fh_error_prefix("fh.trace.start: setting the time base of cuda:%d", d);
      release_recs();
      return st;
    }
    T.base_us[d] = now_us() - T.host0;
  }
  fh__trace_on = true;
  return FH_OK;
}

static int cmp_event(const void *a, const void *b) {
  const fh_trace_event *x = a, *y = b;
  if (x->track != y->track) return x->track < y->track ? -1 : 1;
  if (x->start_us != y->start_us) return x->start_us < y->start_us ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void group_detail(const rec *r, char *buf, size_t size) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < r->nkernels && k + 1 < size; ++i)
    k += (size_t)snprintf(buf + k, size - k, "%s%s x%d", i ? ", " : "", fh_kernel_name(r->kernels[i]),
                          (int)r->kcount[i]);
  if (k + 1 < size && r->nkernels == MAX_GROUP_KERNELS) snprintf(buf + k, size - k, ", ...");
}

fh_status fh_trace_stop(fh_trace **out) {
  if (!fh__trace_on) return fh_error_set(FH_ERR_STATE, "no trace is running (start one with fh.trace.start)");
  if (!pthread_equal(pthread_self(), T.owner))
    return fh_error_set(FH_ERR_STATE, "the trace was started by another thread");
  fh__trace_on = false;
  T.group = -1;
  fh_trace *t = fh_calloc(1, sizeof *t);
  fh_trace_event *ev = fh_calloc(T.n ? T.n : 1, sizeof *ev);
  fh_trace_track *tr = fh_calloc(T.ntracks ? (size_t)T.ntracks : 1, sizeof *tr);
  if (t == NULL || ev == NULL || tr == NULL) {
    fh_free(t);
    fh_free(ev);
    fh_free(tr);
    release_recs();
    return fh_error_set(FH_ERR_MEMORY, "out of memory resolving a trace");
  }
  uint64_t dropped = T.dropped;
  size_t n = 0;
  double end = 0;
  for (size_t i = 0; i < T.n; ++i) {
    rec *r = &T.recs[i];
    if (!r->valid) continue;
    double t0 = r->t0, t1 = r->t1;
    if (r->cuda) {
      double ms0 = 0, ms1 = 0;
      /* waits for the events: the traced work completes first */
      fh_status st = fh_event_elapsed_ms(T.base[r->dev], r->e0, &ms0);
      if (st == FH_OK && r->e1) st = fh_event_elapsed_ms(T.base[r->dev], r->e1, &ms1);
      if (st != FH_OK) {
        fh_error_clear();
        dropped++;
        continue;
      }
      t0 = T.base_us[r->dev] + ms0 * 1e3;
      t1 = r->e1 ? T.base_us[r->dev] + ms1 * 1e3 : t0;
    }
    if (t1 < t0) t1 = t0;
    fh_trace_event *e = &ev[n++];
    e->kind = (fh_trace_kind)r->kind;
    e->track = r->track;
    e->start_us = t0;
    e->dur_us = r->kind == FH_TRACE_WAIT ? 0 : t1 - t0;
    e->bytes = r->bytes;
    e->count = r->count;
    e->seq = i;
    snprintf(e->name, sizeof e->name, "%s", r->name);
    if (r->kind == FH_TRACE_LAUNCHES) {
      if (r->nkernels > 0) snprintf(e->name, sizeof e->name, "%s%s", fh_kernel_name(r->kernels[0]),
                                    r->count > 1 ? " ..." : "");
      group_detail(r, e->detail, sizeof e->detail);
    } else {
      snprintf(e->detail, sizeof e->detail, "%s", r->detail);
    }
    if (t1 > end) end = t1;
  }
  if (T.ntracks > 0) memcpy(tr, T.tracks, sizeof *tr * (size_t)T.ntracks);
  qsort(ev, n, sizeof *ev, cmp_event);
  t->events = ev;
  t->n = n;
  t->tracks = tr;
  t->ntracks = T.ntracks;
  t->duration = end;
  t->dropped = dropped;
  release_recs();
  *out = t;
  return FH_OK;
}

void fh_trace_free(fh_trace *t) {
  if (t == NULL) return;
  fh_free(t->events);
  fh_free(t->tracks);
  fh_free(t);
}

size_t fh_trace_nevents(const fh_trace *t) { return t->n; }
const fh_trace_event *fh_trace_event_at(const fh_trace *t, size_t i) { return i < t->n ? &t->events[i] : NULL; }
int fh_trace_ntracks(const fh_trace *t) { return t->ntracks; }
const fh_trace_track *fh_trace_track_at(const fh_trace *t, int i) {
  return i >= 0 && i < t->ntracks ? &t->tracks[i] : NULL;
}
double fh_trace_duration_us(const fh_trace *t) { return t->duration; }
uint64_t fh_trace_dropped(const fh_trace *t) { return t->dropped; }

/* ---- Chrome trace-event JSON ------------------------------------------------------------ */
static int pid_of(fh_device d) { return d.type == FH_DEVICE_CPU ? 0 : 1 + d.index; }

/* microseconds to the nanosecond (the clocks resolve no finer) */
static json_t *us(double v) { return json_real(round(v * 1e3) / 1e3); }

/* json_object_set_new / json_array_append_new steal `v` (also on failure);
 * true on success, false for a NULL `v` too */
static bool put(json_t *obj, const char *key, json_t *v) { return v != NULL && json_object_set_new(obj, key, v) == 0; }
static bool append(json_t *list, json_t *v) { return v != NULL && json_array_append_new(list, v) == 0; }

static json_t *meta(const char *what, int pid, int tid, const char *key, json_t *value) {
  json_t *m = json_object(), *args = json_object();
  if (m == NULL || args == NULL) {
    json_decref(m);
    json_decref(args);
    json_decref(value);
    return NULL;
  }
  if (!put(args, key, value)) {
    json_decref(m);
    json_decref(args);
    return NULL;
  }
  if (!put(m, "args", args) || !put(m, "name", json_string(what)) || !put(m, "ph", json_string("M")) ||
      !put(m, "pid", json_integer(pid)) || !put(m, "tid", json_integer(tid))) {
    json_decref(m);
    return NULL;
  }
  return m;
}

static json_t *event_json(const fh_trace *t, const fh_trace_event *e) {
  const fh_trace_track *tr = &t->tracks[e->track];
  json_t *o = json_object(), *args = json_object();
  if (o == NULL || !put(o, "args", args)) {
    json_decref(o);
    if (o == NULL) json_decref(args);
    return NULL;
  }
  bool ok = put(o, "name", json_string(e->name)) && put(o, "cat", json_string(fh_trace_kind_name(e->kind))) &&
            put(o, "ph", json_string(e->kind == FH_TRACE_WAIT ? "i" : "X")) && put(o, "ts", us(e->start_us)) &&
            put(o, "pid", json_integer(pid_of(tr->device))) && put(o, "tid", json_integer(e->track)) &&
            put(args, "seq", json_integer((json_int_t)e->seq));
  if (ok && e->kind == FH_TRACE_WAIT) ok = put(o, "s", json_string("t"));
  if (ok && e->kind != FH_TRACE_WAIT) ok = put(o, "dur", us(e->dur_us));
  if (ok && e->kind == FH_TRACE_COPY)
    ok = put(args, "bytes", json_integer((json_int_t)e->bytes)) && put(args, "leaves", json_integer(e->count));
  if (ok && e->kind == FH_TRACE_LAUNCHES) ok = put(args, "launches", json_integer(e->count));
  if (ok && e->kind == FH_TRACE_REPLAY) ok = put(args, "nodes", json_integer(e->count));
  if (ok && e->detail[0]) ok = put(args, "detail", json_string(e->detail));
  if (ok && tr->stream_id) ok = put(args, "stream", json_integer((json_int_t)tr->stream_id));
  if (!ok) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static json_t *build_json(const fh_trace *t) {
  json_t *root = json_object(), *list = json_array(), *other = json_object();
  bool ok = root != NULL && put(root, "traceEvents", list) && put(root, "otherData", other);
  if (root == NULL) {
    json_decref(list);
    json_decref(other);
    return NULL;
  }
  bool pids[MAX_DEVICES + 1] = {false};
  for (int i = 0; ok && i < t->ntracks; ++i) {
    const fh_trace_track *tr = &t->tracks[i];
    int pid = pid_of(tr->device);
    char name[96], dn[FH_DEVICE_NAME_MAX];
    if (pid <= MAX_DEVICES && !pids[pid]) {
      pids[pid] = true;
      ok = append(list, meta("process_name", pid, 0, "name",
                             json_string(pid == 0 ? "host" : fh_device_name(tr->device, dn)))) &&
           append(list, meta("process_sort_index", pid, 0, "sort_index", json_integer(pid)));
    }
    fh_trace_track_label(tr, name, sizeof name);
    ok = ok && append(list, meta("thread_name", pid, i, "name", json_string(name))) &&
         append(list, meta("thread_sort_index", pid, i, "sort_index", json_integer(i)));
  }
  for (size_t i = 0; ok && i < t->n; ++i) ok = append(list, event_json(t, &t->events[i]));
  ok = ok && put(other, "producer", json_string("fhelium " FH_VERSION_STRING)) &&
       put(other, "dropped_events", json_integer((json_int_t)t->dropped)) &&
       put(other, "duration_us", us(t->duration)) && put(root, "displayTimeUnit", json_string("ms"));
  if (!ok) {
    json_decref(root);
    return NULL;
  }
  return root;
}

fh_status fh_trace_save_json(const fh_trace *t, const char *path) {
  json_t *root = build_json(t);
  if (root == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory building the trace JSON");
  /* serialized in memory first: running out of memory is a MemoryError, and
   * only what the file system refuses an IOError */
  char *text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(12));
  json_decref(root);
  if (text == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory writing the trace JSON");
  FILE *f = fh_fopen(path, "w");
  if (f == NULL) {
    int e = errno;
    fh_free(text);
    return fh_error_set(FH_ERR_IO, "cannot open '%s': %s", path, strerror(e));
  }
  size_t len = strlen(text);
  /* one write of the whole JSON for fault injection (fh/fault.h) */
  bool fault = fh_fault_io_now();
  size_t w = fault ? 0 : fwrite(text, 1, len, f);
  fh_free(text);
  int werr = fault ? EIO : (w != len || ferror(f)) ? (errno ? errno : EIO) : 0;
  if (fh_fclose(f) != 0 && werr == 0) werr = errno;
  if (werr != 0) return fh_error_set(FH_ERR_IO, "cannot write '%s': %s", path, strerror(werr));
  return FH_OK;
}
