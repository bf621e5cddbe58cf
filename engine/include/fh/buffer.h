/* fhelium reusable value buffers and copy handles (docs/api.md "Execution:
 * buffers and copy handles").
 *
 * A buffer owns one storage per leaf of a tree signature, on one target
 * device, laid out exactly like the example's leaves (shape, strides, dtype,
 * requires_grad; the storage starts at the view's element 0, so offsets are
 * not kept). The storages never move: views rebuilt by fh_buffer_leaves have
 * the same addresses for the buffer's whole life.
 *
 * Copies (fh_buffer_copy_from) move a validated source's leaves into the
 * owned storage. The caller validates the source tree against the buffer's
 * signature first (structure, topology, exact state: the Lua binding walks
 * the tree); the engine then checks devices and streams, and only then moves
 * bytes, so a rejected source leaves the buffer untouched.
 *   CPU target:  synchronous; the handle has no event; passing a stream or
 *                wait events is a ValueError.
 *   CUDA target: enqueued on `stream` (NULL: the target device's current
 *                stream; a stream of another device is a ValueError), after
 *                the `wait` events and after this buffer's previous copy.
 *                An event recorded after the last leaf makes the handle.
 * Ordering contract: a handle's event proves the new payload is in the
 * buffer; it does not prove that an earlier reader of the old payload has
 * finished reading it. The caller passes, as `wait`, an event recorded after
 * that reader.
 *
 * Lifetime. A handle holds one reference to each submitted source tensor in
 * pinned host or device memory (a pageable host source is staged into pinned
 * memory before the copy returns and is not held) and to each target storage
 * until its completion is observed (done() true,
 * synchronize, or the buffer's close), then drops them. The buffer keeps its
 * in-flight handles. Releasing a buffer (the Lua GC) while a copy is pending
 * frees nothing early: the handles keep the target storages, and the
 * allocators reuse a block only after the streams that used it are done.
 *
 * Close. fh_buffer_close waits for the in-flight copies, then releases the
 * storages; it is idempotent. Every other operation on a closed buffer is an
 * ExecutionError "... closed".
 *
 * Ownership: fh_buffer_new and fh_buffer_copy_from return new references
 * (fh_buffer_release, fh_copy_handle_release). fh_buffer_leaves fills new
 * tensor references. Other getters return borrowed pointers valid while the
 * object lives. Objects are not thread-safe (one Lua state uses them). */
#ifndef FH_BUFFER_H
#define FH_BUFFER_H

#include "fh/signature.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fh_buffer fh_buffer;
typedef struct fh_copy_handle fh_copy_handle;

/* A new buffer shaped like `sig` (retained) whose leaves are initialised
 * with a copy of `examples` (sig->nleaves tensors, depth-first leaf order).
 * `dev` NULL: the one device of every example tensor (ValueError naming the
 * devices when they differ). Rejects: no leaves (ValueError), a leaf whose
 * elements overlap in memory (ValueError), two leaves sharing one storage
 * (ValueError naming both leaves), `pin` with a non-CPU target (ValueError).
 * The initial copy is complete on return. Leaf names in messages are
 * "<root>[1]["key"]" paths (".data" etc. for a value's tensors). */
fh_status fh_buffer_new(fh_tree_sig *sig, fh_tensor *const *examples, const fh_device *dev, bool pin,
                        const char *root, fh_buffer **out);
void fh_buffer_retain(fh_buffer *b);
void fh_buffer_release(fh_buffer *b);

fh_tree_sig *fh_buffer_signature(const fh_buffer *b); /* borrowed */
fh_device fh_buffer_device(const fh_buffer *b);
bool fh_buffer_is_pinned(const fh_buffer *b);
bool fh_buffer_is_closed(const fh_buffer *b);
uint64_t fh_buffer_id(const fh_buffer *b); /* unique per process */
int64_t fh_buffer_nleaves(const fh_buffer *b);
/* Bytes of the leaves (sum of numel * element size). */
size_t fh_buffer_nbytes(const fh_buffer *b);
/* Bytes of the owned storages (what the buffer holds). */
size_t fh_buffer_storage_bytes(const fh_buffer *b);
/* Storage of leaf i (borrowed; NULL once closed). */
fh_storage *fh_buffer_leaf_storage(const fh_buffer *b, int64_t i);

/* New tensor views over the owned storages (nleaves new references into
 * `out`). ExecutionError when closed. */
fh_status fh_buffer_leaves(fh_buffer *b, fh_tensor **out);

/* Copy `src` (nleaves tensors, already validated against the signature)
 * into the buffer. `stream` NULL: the target's current stream. `wait` may
 * hold NULL entries (skipped). New handle in *out. */
fh_status fh_buffer_copy_from(fh_buffer *b, fh_tensor *const *src, fh_stream *stream, bool non_blocking,
                              fh_event *const *wait, int nwait, fh_copy_handle **out);
/* `stream` waits (on the device) for handle h of this buffer; CPU buffer:
 * stream must be NULL, nothing to wait for. A handle of another buffer is
 * an ExecutionInputError; a stream of another device a ValueError. */
fh_status fh_buffer_wait_for(fh_buffer *b, fh_copy_handle *h, fh_stream *stream);
/* The copies not known complete, after dropping those that are (no
 * blocking); -1 when that cannot be asked now (during a capture). */
int fh_buffer_pending_copies(fh_buffer *b);
/* Drop the in-flight handles whose copies have completed (no blocking). */
fh_status fh_buffer_poll(fh_buffer *b);
/* Wait for the in-flight copies, then release the storages. Idempotent. */
fh_status fh_buffer_close(fh_buffer *b);
/* ExecutionError "<what>: the buffer is closed" when closed. */
fh_status fh_buffer_check_open(const fh_buffer *b, const char *what);

/* ---- copy handles ---------------------------------------------------------- */
void fh_copy_handle_retain(fh_copy_handle *h);
void fh_copy_handle_release(fh_copy_handle *h);
/* The completion event (borrowed); NULL for a CPU target. */
fh_event *fh_copy_handle_event(const fh_copy_handle *h);
/* Whether the handle holds source leaf i (pending, and in pinned or device memory). */
bool fh_copy_handle_holds_source(const fh_copy_handle *h, int64_t i);
fh_device fh_copy_handle_device(const fh_copy_handle *h);
size_t fh_copy_handle_bytes(const fh_copy_handle *h);
uint64_t fh_copy_handle_owner(const fh_copy_handle *h); /* the buffer's id */
/* The stream the copy ran on (borrowed; NULL for a CPU target). */
fh_stream *fh_copy_handle_stream(const fh_copy_handle *h);
/* *done: the copy has completed; then the sources are released. Never
 * blocks. */
fh_status fh_copy_handle_done(fh_copy_handle *h, bool *done);
/* `s` waits for the copy (CPU not blocked). ValueError when `s` belongs to
 * another device than the handle's (every stream does, for a CPU handle). */
fh_status fh_copy_handle_wait_on(fh_copy_handle *h, fh_stream *s);
/* Block until the copy completed, then release the sources. */
fh_status fh_copy_handle_synchronize(fh_copy_handle *h);
/* True once the sources have been released. */
bool fh_copy_handle_released(const fh_copy_handle *h);

/* ---- helpers shared with programs and the binding ---------------------------- */
/* The name of leaf i of `sig` rooted at `root` ("value[2]["w"]",
 * "value[1].data" for a value's tensor) into buf. */
const char *fh_tree_sig_leaf_name(const fh_tree_sig *sig, int64_t i, const char *root, char *buf, size_t size);
/* A tensor with t's shape, strides, dtype and requires_grad over a new
 * storage of exactly the span those strides reach, on `dev` (pinned when
 * `pin`). Contents uninitialised. ValueError when t's elements overlap. */
fh_status fh_tensor_empty_like_layout(const fh_tensor *t, fh_device dev, bool pin, fh_tensor **out);
/* Copies of `n` leaves with their layouts on `dev` (pinned when `pin`), the
 * copy complete on return. New references into out. */
fh_status fh_leaves_clone(fh_tensor *const *leaves, int64_t n, fh_device dev, bool pin, fh_tensor **out);
/* Copies of `n` leaves with their layouts on `dev` (pinned when `pin`, a
 * host target only), enqueued on `stream` (NULL: the current stream of the
 * leaves' CUDA device; cpu to cpu copies are synchronous and take no
 * stream) without waiting: a pinned or CUDA target is complete once the
 * work queued on that stream so far has run. The allocators keep both
 * sides until then. One traced copy ("read-back"). New references into out. */
fh_status fh_leaves_copy_to(fh_tensor *const *leaves, int64_t n, fh_device dev, bool pin, fh_stream *stream,
                            fh_tensor **out);
/* Sum of the leaves' nbytes. */
size_t fh_leaves_nbytes(fh_tensor *const *leaves, int64_t n);

/* fh_buffer_copy_from whose traced copy is called `trace_name`. */
fh_status fh__buffer_copy_from_named(fh_buffer *b, fh_tensor *const *src, fh_stream *stream, bool non_blocking,
                                     fh_event *const *wait, int nwait, fh_copy_handle **out, const char *trace_name);

/* Programs' replay(): copy `src` (validated) into `b` on `s` (NULL for a
 * CPU buffer: synchronous) after `wait` (may be NULL) and after the
 * buffer's last in-flight copy, without a handle or event: the caller
 * orders later work on `s` and records the event that covers the copy.
 * Small leaves from pinned host memory with the target's exact layout move
 * in FH_K_COPY_BATCH kernels on `s` (no copy-engine latency); the others
 * through fh_tensor_copy_. Sources are guarded by record-stream either way. */
fh_status fh__buffer_copy_ordered(fh_buffer *b, fh_tensor *const *src, fh_stream *s, fh_event *wait,
                                  const char *what);

/* Execution capture state of the calling thread (set by programs while a
 * capture runs): buffers refuse copies then, and completion checks (event
 * queries) are postponed. */
bool fh_exec_capturing(void);
/* FH_OK unless a capture (CUDA or host) is active on this thread; then a
 * CudaGraphCaptureError (stage "capture") "<what> cannot run inside a
 * function being captured (<why>)": `what` is the function the user called,
 * `why` (NULL: none) says why and what to do instead. */
fh_status fh_exec_refuse_in_capture(const char *what, const char *why);

#ifdef __cplusplus
}
#endif
#endif
