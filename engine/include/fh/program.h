/* fhelium programs: work captured once and replayed at fixed addresses
 * (docs/api.md "Execution: programs", ARCHITECTURE.md "Capture").
 *
 * Two kinds share one object and one set of rules:
 *   CUDA graph  a thread-local stream capture on the program's side stream,
 *               allocations on the device routed to the program's private
 *               memory pool (fh/cuda_alloc.h), instantiated into a CUDA
 *               graph and launched on the replaying stream.
 *   host graph  a host tape (fh/launch.h): every CPU launch of the captured
 *               function is recorded, nothing runs, and replay runs the tape.
 *
 * The function itself runs in the Lua layer (lua/fhelium/programs.lua) between
 * fh_program_capture_begin and fh_program_capture_end; this object owns
 * everything the captured work touches:
 *   - the input buffer (fh/buffer.h), whose storages the graph reads;
 *   - every storage a launch or copy used during the capture (recorded through
 *     the storage use observer, fh/storage.h; for host graphs, the tape), so
 *     static state captured from upvalues cannot be freed under the graph;
 *   - the private pool (CUDA), whose blocks stay reserved until close;
 *   - the graph (CUDA) or tape (host), the side stream and the replay event.
 *
 * Ordering. A program never replays concurrently with itself: every input
 * copy and every launch is ordered after the previous launch (the replay
 * event); a launch is ordered after the copy it consumes. The prepared path
 * follows the "latest CopyHandle" rule: while a copy_inputs handle is
 * outstanding (not yet replayed), replay_prepared needs exactly that handle;
 * an older, already replayed or foreign handle is a CudaGraphInputError.
 *
 * Close waits for pending copies and launches, then destroys the graph and
 * releases the buffer, the kept storages and the pool. Dropping the last
 * reference without close never blocks: a program whose last launch is
 * still running is parked and finished by a later fh_exec_sweep.
 *
 * Ownership: fh_program_new, fh_program_copy_inputs return new references.
 * Getters return borrowed pointers valid while the program is open. */
#ifndef FH_PROGRAM_H
#define FH_PROGRAM_H

#include "fh/buffer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fh_program_kind { FH_PROGRAM_CUDA_GRAPH = 0, FH_PROGRAM_HOST_GRAPH } fh_program_kind;
typedef struct fh_program fh_program;

/* A program over `inputs` (retained): its device must be CUDA for a CUDA
 * graph and the CPU for a host graph (ValueError). Creates the side stream
 * and pool (CUDA) or tape (host). */
fh_status fh_program_new(fh_program_kind kind, fh_buffer *inputs, fh_program **out);
void fh_program_retain(fh_program *p);
void fh_program_release(fh_program *p);

fh_program_kind fh_program_get_kind(const fh_program *p);
fh_device fh_program_device(const fh_program *p);
uint64_t fh_program_id(const fh_program *p); /* unique per process */
/* True while the last launch may still run (never blocks; false for host
 * graphs, whose replays complete before they return). */
bool fh_program_pending(fh_program *p);
fh_buffer *fh_program_inputs(const fh_program *p);     /* borrowed; NULL once closed */
fh_stream *fh_program_side_stream(const fh_program *p); /* borrowed; NULL for host graphs */
bool fh_program_is_closed(const fh_program *p);
/* ExecutionError "<what>: the program is closed". */
fh_status fh_program_check_open(const fh_program *p, const char *what);

/* Start capturing on this thread (once per program). CUDA: the side stream
 * becomes the device's current stream, the pool starts routing allocations
 * and the stream starts a thread-local capture. Host: the tape starts
 * recording. Captures do not nest (ExecutionError). */
fh_status fh_program_capture_begin(fh_program *p);
/* Stop capturing and restore the current stream. `keep` false (the function
 * failed): discard what was captured and return FH_OK. With `keep`, failures
 * of the capture itself are CudaGraphCaptureError, stage "capture": work on a
 * forked stream not joined back (naming the streams), a capture invalidated
 * by a non-capturable call. */
fh_status fh_program_capture_end(fh_program *p, bool keep);
/* CUDA: instantiate the captured graph (CudaGraphCaptureError, stage
 * "capture", on failure). Host: nothing to do. */
fh_status fh_program_instantiate(fh_program *p);

/* Replays; `stream` NULL means the device's current stream (host: must be
 * NULL). All validate the program state before moving anything.
 *   replay:         copy `src` (validated leaves) into the inputs on the
 *                   stream after the previous launch, then launch;
 *   copy_inputs:    only the copy (on `stream`, after `wait` and the previous
 *                   launch); the handle becomes the latest one;
 *   replay_prepared: launch on `stream` after `h` (the latest handle, or NULL
 *                   when none is outstanding).
 * Their errors name the operation `what` (the caller's name for it; NULL:
 * "replay", "copy_inputs_from", "replay_prepared").
 * `synchronize` waits for the launch before returning. */
fh_status fh_program_replay(fh_program *p, fh_tensor *const *src, bool synchronize, const char *what);
fh_status fh_program_copy_inputs(fh_program *p, fh_tensor *const *src, fh_stream *stream, bool non_blocking,
                                 fh_event *const *wait, int nwait, fh_copy_handle **out, const char *what);
fh_status fh_program_replay_prepared(fh_program *p, fh_copy_handle *h, fh_stream *stream, bool synchronize,
                                     const char *what);
/* Launch with the current inputs (the first replay). */
fh_status fh_program_launch(fh_program *p, bool synchronize);
/* The stream of the last launch (borrowed; NULL before the first launch or
 * for host graphs) and its completion event (NULL likewise). */
fh_stream *fh_program_replay_stream(const fh_program *p);
fh_event *fh_program_replay_event(const fh_program *p);
/* Block until the last launch has completed. */
fh_status fh_program_synchronize(fh_program *p);
/* Work enqueued on the replay stream after the last launch reads the
 * program's storage (copy_output's copies): record the replay event again
 * on that stream, so that the next replay's input copy and launch, and
 * close, also wait for it. No-op for host graphs, before the first launch,
 * or when `s` is not the replay stream. */
fh_status fh_program_note_reads(fh_program *p, fh_stream *s);
/* Wait for pending copies and launches, then release everything.
 * Idempotent. ExecutionError while the program is capturing. */
fh_status fh_program_close(fh_program *p);

typedef struct fh_program_stats {
  uint64_t replays;            /* launches so far, the first replay included */
  uint64_t node_count;         /* graph nodes (CUDA) or tape entries (host) */
  uint64_t memory_allocated;   /* bytes of every storage the captured work touches, once each */
  uint64_t memory_reserved;    /* CUDA: the private pool's reservation; host: = memory_allocated */
} fh_program_stats;
void fh_program_get_stats(const fh_program *p, fh_program_stats *out);

/* Finish parked programs whose work has completed (never blocks; does
 * nothing while a capture runs on this thread). */
void fh_exec_sweep(void);

/* Test aid: the next `n` launches of any program on this thread fail with
 * an ExecutionError before launching anything. */
void fh__program_fail_next_launches(int n);

/* Internal: the execution capture flag of the calling thread
 * (fh_exec_capturing, fh/buffer.h). */
void fh__exec_set_capturing(bool on);

/* ---- CUDA graph back end (engine/exec/graph.cu; engine/exec/graph_none.c
 * without CUDA) --------------------------------------------------------------- */
typedef struct fh__graph fh__graph;
/* Begin a thread-local capture on `s`. */
fh_status fh__graph_begin(fh_stream *s);
/* End the capture on `s`. `forks` are the other streams the captured work
 * used. With `keep`, checks that every fork was joined back (naming the
 * ones that were not) and returns the graph in *out; without, discards it
 * (*out NULL) and returns FH_OK. The capture is over in every case. */
fh_status fh__graph_end(fh_stream *s, fh_stream *const *forks, int nforks, bool keep, fh__graph **out);
fh_status fh__graph_instantiate(fh__graph *g, uint64_t *nodes);
fh_status fh__graph_launch(fh__graph *g, fh_stream *s);
void fh__graph_free(fh__graph *g); /* safe while a launch is in flight */

#ifdef __cplusplus
}
#endif
#endif
