/* fhelium tracing: a timeline of the work one thread submits (fh.trace).
 *
 * fh_trace_start() makes the calling thread the traced thread; until
 * fh_trace_stop() the engine records, for that thread:
 *   copy      a copy of a tree into a buffer (copy_from, copy_inputs_from,
 *             replay's input copy), a read-back of a tree (fh_leaves_copy_to)
 *             or a tensor copy, with its bytes and direction;
 *   replay    a program launch (a CUDA graph or a host tape), with its nodes;
 *   launches  a group of eager launches: consecutive launches on one stream
 *             (or on the cpu) with no other traced work between them and no
 *             host gap above FH_TRACE_GROUP_GAP_US, with the count and the
 *             kernels' names;
 *   sync      the host blocked: a stream, event or device synchronize;
 *   wait      a stream waits (on the device) for an event or another stream:
 *             an instant at the moment the wait is satisfied.
 * Times: work on a CUDA stream is timed by CUDA events recorded on the
 * stream before and after it (so a bar is when the device ran it, not when
 * the host submitted it); host work (the cpu device, host synchronizations)
 * by the host's monotonic clock. Both are microseconds since the start.
 * Work nested inside a traced operation (the copies of one copy_from, a
 * replay's kernels) belongs to that operation and is not recorded again.
 * Nothing is recorded while a capture is active (a host tape or a CUDA
 * stream capture records launches rather than running them), nor for other
 * threads.
 *
 * Cost. With tracing off every hook is one branch on fh__trace_on. With
 * tracing on: two event records per operation on CUDA streams (one per
 * launch of a group), a clock read on the host. fh_trace_start synchronizes
 * each CUDA device's default stream once (the time base); fh_trace_stop
 * waits for the traced work to complete, then reads the events.
 *
 * Ownership: fh_trace_stop returns an owned trace (fh_trace_free). Events and
 * tracks returned by the getters are borrowed from it. */
#ifndef FH_TRACE_H
#define FH_TRACE_H

#include "fh/core.h"
#include "fh/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fh_trace_kind {
  FH_TRACE_COPY = 0,
  FH_TRACE_REPLAY,
  FH_TRACE_LAUNCHES,
  FH_TRACE_SYNC,
  FH_TRACE_WAIT,
  FH_TRACE_KINDS
} fh_trace_kind;

/* "copy", "replay", "launches", "sync", "wait" */
const char *fh_trace_kind_name(fh_trace_kind k);

#define FH_TRACE_GROUP_GAP_US 50.0
#define FH_TRACE_MAX_EVENTS (1 << 20)

/* True while a trace runs (any thread). The hooks' one branch. */
extern bool fh__trace_on;

/* Start tracing the calling thread. StateError when a trace already runs;
 * CudaError when a device's time base cannot be set. */
fh_status fh_trace_start(void);
bool fh_trace_active(void);

typedef struct fh_trace fh_trace;
/* Stop, wait for the traced work, resolve the times; a new trace in *out.
 * StateError when no trace runs or another thread started it. */
fh_status fh_trace_stop(fh_trace **out);
void fh_trace_free(fh_trace *t);

typedef struct fh_trace_track {
  fh_device device;   /* cpu: the host track (the traced thread) */
  uint64_t stream_id; /* 0 for the host track */
  int priority;
  bool is_default;
  char name[FH_STREAM_NAME_MAX]; /* the stream's name when it had one */
} fh_trace_track;

typedef struct fh_trace_event {
  fh_trace_kind kind;
  int track;       /* index into the tracks */
  double start_us; /* since the start */
  double dur_us;   /* 0 for waits */
  uint64_t bytes;  /* copies */
  int64_t count;   /* launches of a group, nodes of a replay, leaves of a copy */
  uint64_t seq;    /* submission order */
  char name[64];
  char detail[160];
} fh_trace_event;

size_t fh_trace_nevents(const fh_trace *t);
const fh_trace_event *fh_trace_event_at(const fh_trace *t, size_t i); /* sorted by track, then start */
int fh_trace_ntracks(const fh_trace *t);
const fh_trace_track *fh_trace_track_at(const fh_trace *t, int i);
double fh_trace_duration_us(const fh_trace *t); /* start to the last event's end */
uint64_t fh_trace_dropped(const fh_trace *t);   /* events not recorded (limits, failed event records) */
/* A track's display name: "host", "stream 7 (copy-in)", "default stream". */
const char *fh_trace_track_label(const fh_trace_track *tr, char *buf, size_t size);

/* Write Chrome trace-event JSON (Perfetto, chrome://tracing): one process
 * per device ("host", "cuda:0", ...), one thread (track) per stream,
 * complete events ("X") for copies, replays, launch groups and syncs,
 * instant events ("i") for waits; args carry bytes, counts and details.
 * IOError naming the path when the file cannot be written. */
fh_status fh_trace_save_json(const fh_trace *t, const char *path);

/* ---- hooks (call only when fh__trace_on) --------------------------------- */
/* A token for fh__trace_end: FH_TRACE_SKIP (not traced: end does nothing),
 * FH_TRACE_NESTED (inside a traced operation) or a record index. `s` is the
 * CUDA stream the operation runs on, NULL for host work (`dev` the cpu). */
#define FH_TRACE_SKIP (-2)
#define FH_TRACE_NESTED (-1)
int fh__trace_begin(fh_trace_kind kind, const char *name, fh_device dev, fh_stream *s);
/* End the operation of `token`; `detail` may be NULL. Never changes the
 * calling thread's error record. */
void fh__trace_end(int token, uint64_t bytes, int64_t count, const char *detail);
/* A wait instant on `s`'s track after `s` was made to wait; `detail` says for what. */
void fh__trace_wait(fh_stream *s, const char *detail);
/* "cpu (pinned) -> cuda:0" into buf. */
const char *fh__trace_direction(char *buf, size_t size, fh_device src, bool src_pinned, fh_device dst, bool dst_pinned);
/* True while some CUDA capture is active (nothing may be recorded then);
 * false without CUDA. */
bool fh__cuda_any_capture(void);

#ifdef __cplusplus
}
#endif
#endif
