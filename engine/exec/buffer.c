/* Reusable value buffers and copy handles (fh/buffer.h). */
#include "fh/buffer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fh/internal.h"
#include "fh/kernels.h"
#include "fh/program.h"
#include "fh/trace.h"

struct fh_copy_handle {
  fh_refcount rc;
  uint64_t owner;
  fh_device dev;
  fh_event *event;   /* one reference; NULL for a CPU target */
  fh_stream *stream; /* one reference; NULL for a CPU target */
  size_t bytes;
  int64_t n;
  fh_tensor **sources;  /* n references until released */
  fh_storage **targets; /* n references until released */
  bool released;
};

struct fh_buffer {
  fh_refcount rc;
  uint64_t id;
  fh_tree_sig *sig; /* one reference */
  fh_device dev;
  bool pinned, closed;
  int64_t n;
  fh_tensor **leaves; /* n references (one storage each); NULL once closed */
  size_t nbytes, storage_bytes;
  /* copies not known complete, oldest first (each holds a reference);
   * every copy waits for the one before, so they complete in order */
  fh_copy_handle **inflight;
  int ninflight, capinflight;
};

static atomic_uint_fast64_t g_buffer_ids;
static _Thread_local bool tl_capturing;

bool fh_exec_capturing(void) { return tl_capturing; }
void fh__exec_set_capturing(bool on) { tl_capturing = on; }

/* ---- layouts --------------------------------------------------------------------- */
/* Elements a view reaches from element 0 (0 for an empty view). */
static int64_t span_elements(const fh_tensor *t) {
  if (fh_tensor_numel(t) == 0) return 0;
  int64_t hi = 0;
  for (int i = 0; i < t->ndim; ++i) hi += (t->shape[i] - 1) * t->stride[i];
  return hi + 1;
}

fh_status fh_tensor_empty_like_layout(const fh_tensor *t, fh_device dev, bool pin, fh_tensor **out) {
  if (fh_tensor_is_self_overlapping(t))
    return fh_error_set(FH_ERR_VALUE,
                        "its elements overlap in memory (a stride-0 or expanded view); a buffer cannot hold it "
                        "(pass a contiguous() copy)");
  size_t bytes = 0;
  if (fh_mul_overflow((size_t)span_elements(t), fh_dtype_size((fh_dtype)t->dtype), &bytes))
    return fh_error_set(FH_ERR_MEMORY, "tensor span overflows size_t");
  fh_storage *s = NULL;
  fh_status st = fh_storage_new(dev, bytes, pin ? FH_STORAGE_PINNED : 0, &s);
  if (st != FH_OK) return st;
  fh_tensor *r = NULL;
  st = fh_tensor_from_storage(s, 0, t->ndim, t->shape, t->stride, (fh_dtype)t->dtype, &r);
  fh_storage_release(s);
  if (st != FH_OK) return st;
  r->requires_grad = t->requires_grad;
  *out = r;
  return FH_OK;
}

size_t fh_leaves_nbytes(fh_tensor *const *leaves, int64_t n) {
  size_t s = 0;
  for (int64_t i = 0; i < n; ++i) s += fh_tensor_nbytes(leaves[i]);
  return s;
}

/* Release t[0..n) and clear the slots: a failed call hands back no
 * references (its caller may release what the array holds). */
static void release_all(fh_tensor **t, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (t[i]) {
      fh_tensor_release(t[i]);
      t[i] = NULL;
    }
}

fh_status fh_exec_refuse_in_capture(const char *what, const char *why) {
  if (!tl_capturing && fh_tape_active() == NULL) return FH_OK;
  fh_error_set(FH_ERR_CAPTURE, "%s cannot run inside a function being captured%s%s%s", what, why ? " (" : "",
               why ? why : "", why ? ")" : "");
  fh_error_set_stage("capture");
  return FH_ERR_CAPTURE;
}

static fh_status refuse_in_capture(const char *what) {
  return fh_exec_refuse_in_capture(
      what, "its copies and completion checks are host-side work; move it before the capture or between replays");
}

/* Copy src[i] into dst[i] for every leaf, completing before return. */
static fh_status copy_complete(fh_tensor *const *dst, fh_tensor *const *src, int64_t n, fh_device dev) {
  fh_stream *s = NULL;
  fh_status st = FH_OK;
  if (dev.type == FH_DEVICE_CUDA && (st = fh_stream_current(dev, &s)) != FH_OK) return st;
  for (int64_t i = 0; i < n && st == FH_OK; ++i) st = fh_tensor_copy_(dst[i], src[i], s, s != NULL);
  if (st == FH_OK && s != NULL) st = fh_stream_synchronize(s);
  return st;
}

fh_status fh_leaves_clone(fh_tensor *const *leaves, int64_t n, fh_device dev, bool pin, fh_tensor **out) {
  fh_status st = refuse_in_capture("cloning a value tree");
  if (st != FH_OK) return st;
  fh_tensor **tmp = fh_calloc(n ? (size_t)n : 1, sizeof *tmp);
  if (tmp == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory cloning a tree");
  for (int64_t i = 0; i < n && st == FH_OK; ++i) st = fh_tensor_empty_like_layout(leaves[i], dev, pin, &tmp[i]);
  if (st == FH_OK) st = copy_complete(tmp, leaves, n, dev);
  if (st != FH_OK) {
    release_all(tmp, n);
    fh_free(tmp);
    return st;
  }
  memcpy(out, tmp, sizeof *tmp * (size_t)n);
  fh_free(tmp);
  return FH_OK;
}

/* The detail of a traced tree copy: "<n> leaves, <first leaf's direction>". */
static const char *copy_detail(char *buf, size_t size, fh_tensor *const *dst, fh_tensor *const *src, int64_t n) {
  char d[96] = "";
  if (n > 0)
    fh__trace_direction(d, sizeof d, fh_tensor_device(src[0]), fh_tensor_is_pinned(src[0]), fh_tensor_device(dst[0]),
                        fh_tensor_is_pinned(dst[0]));
  snprintf(buf, size, "%lld lea%s, %s", (long long)n, n == 1 ? "f" : "ves", d);
  return buf;
}

fh_status fh_leaves_copy_to(fh_tensor *const *leaves, int64_t n, fh_device dev, bool pin, fh_stream *stream,
                            fh_tensor **out) {
  const char *fn = "copying a value tree";
  fh_status st = refuse_in_capture(fn);
  if (st != FH_OK) return st;
  if (pin && dev.type != FH_DEVICE_CPU)
    return fh_error_set(FH_ERR_VALUE, "%s: pinned memory is host memory; the target is not the cpu", fn);
  /* the stream of the copies: the CUDA side's (all leaves on one device) */
  fh_device side = dev;
  for (int64_t i = 0; i < n && side.type == FH_DEVICE_CPU; ++i)
    if (fh_tensor_device(leaves[i]).type == FH_DEVICE_CUDA) side = fh_tensor_device(leaves[i]);
  for (int64_t i = 0; i < n; ++i) {
    fh_device d = fh_tensor_device(leaves[i]);
    if (d.type == FH_DEVICE_CUDA && side.type == FH_DEVICE_CUDA && !fh_device_eq(d, side)) {
      char a[FH_DEVICE_NAME_MAX], c[FH_DEVICE_NAME_MAX];
      return fh_error_set(FH_ERR_VALUE, "%s: the tree's leaves are on %s and %s (one CUDA device expected)", fn,
                          fh_device_name(side, a), fh_device_name(d, c));
    }
    if ((st = fh_device_check(d)) != FH_OK) return st;
  }
  if ((st = fh_device_check(dev)) != FH_OK) return st;
  fh_stream *s = NULL;
  if (side.type == FH_DEVICE_CUDA && (st = fh__op_stream(side, stream, &s)) != FH_OK) {
    fh_error_prefix("%s", fn);
    return st;
  }
  if (side.type == FH_DEVICE_CPU && stream != NULL)
    return fh_error_set(FH_ERR_VALUE, "%s: every leaf and the target are on cpu, where copies are synchronous; "
                                      "there is no stream to copy on", fn);
  fh_tensor **tmp = fh_calloc(n ? (size_t)n : 1, sizeof *tmp);
  if (tmp == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory copying a tree");
  for (int64_t i = 0; i < n && st == FH_OK; ++i) st = fh_tensor_empty_like_layout(leaves[i], dev, pin, &tmp[i]);
  int tr = st == FH_OK && fh__trace_on ? fh__trace_begin(FH_TRACE_COPY, "read-back", side, s) : FH_TRACE_SKIP;
  /* non_blocking: a pinned or device target is written asynchronously on s,
   * and the allocators guard both sides (record-stream) until it has run */
  for (int64_t i = 0; i < n && st == FH_OK; ++i) st = fh_tensor_copy_(tmp[i], leaves[i], s, s != NULL);
  if (tr != FH_TRACE_SKIP) {
    char d[160];
    fh__trace_end(tr, st == FH_OK ? fh_leaves_nbytes(leaves, n) : 0, n, copy_detail(d, sizeof d, tmp, leaves, n));
  }
  if (st != FH_OK) {
    if (s != NULL) {
      char msg[FH_ERROR_MESSAGE_MAX];
      fh_status keep = fh_error_status();
      snprintf(msg, sizeof msg, "%s", fh_error_message());
      (void)fh_stream_synchronize(s);
      fh_error_set(keep, "%s", msg);
    }
    release_all(tmp, n);
    fh_free(tmp);
    return st;
  }
  memcpy(out, tmp, sizeof *tmp * (size_t)n);
  fh_free(tmp);
  return FH_OK;
}

/* ---- leaf names -------------------------------------------------------------------- */
static bool find_leaf(const fh_tree_sig *s, int64_t *i, fh_path *p, const char **suffix) {
  if (s->kind == FH_TREE_TENSOR) {
    if (*i == 0) return true;
    (*i)--;
    return false;
  }
  if (s->kind == FH_TREE_VALUE) {
    if (*i < s->value.ntensors) {
      bool slots = s->value.state.type == FH_PLAINTEXT && s->value.state.representation == FH_REPR_SLOTS;
      *suffix = slots ? ".message" : ".data";
      return true;
    }
    *i -= s->value.ntensors;
    return false;
  }
  if (p->depth >= FH_TREE_MAX_DEPTH) return false;
  fh_path_seg *seg = &p->seg[p->depth++];
  for (int32_t c = 0; c < s->nchildren; ++c) {
    if (*i >= s->children[c]->nleaves) {
      *i -= s->children[c]->nleaves;
      continue;
    }
    seg->is_key = s->kind == FH_TREE_DICT;
    seg->index = c;
    seg->key = seg->is_key ? s->keys[c] : NULL;
    seg->key_len = seg->is_key ? s->key_lens[c] : 0;
    return find_leaf(s->children[c], i, p, suffix);
  }
  p->depth--;
  return false;
}

const char *fh_tree_sig_leaf_name(const fh_tree_sig *sig, int64_t i, const char *root, char *buf, size_t size) {
  fh_path p;
  p.depth = 0;
  const char *suffix = "";
  int64_t k = i;
  if (!find_leaf(sig, &k, &p, &suffix)) {
    snprintf(buf, size, "%s (leaf %lld)", root ? root : "value", (long long)i + 1);
    return buf;
  }
  fh_path_format(&p, root, buf, size);
  size_t l = strlen(buf);
  if (l + strlen(suffix) + 1 <= size) strcpy(buf + l, suffix);
  return buf;
}

/* ---- buffers ------------------------------------------------------------------------- */
typedef struct sp {
  const fh_storage *s;
  int64_t i;
} sp;
static int sp_cmp(const void *a, const void *b) {
  const sp *x = a, *y = b;
  if (x->s != y->s) return (uintptr_t)x->s < (uintptr_t)y->s ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

fh_status fh_buffer_new(fh_tree_sig *sig, fh_tensor *const *examples, const fh_device *dev, bool pin,
                        const char *root, fh_buffer **out) {
  char a[600], b[600], da[FH_DEVICE_NAME_MAX], db[FH_DEVICE_NAME_MAX];
  root = root ? root : "value";
  int64_t n = sig->nleaves;
  if (n <= 0)
    return fh_error_set(FH_ERR_VALUE, "%s has no tensor leaves (a buffer needs at least one tensor or value)", root);
  fh_status st = refuse_in_capture("ex.ReusableValueBuffer.like");
  if (st != FH_OK) return st;
  fh_device target;
  if (dev != NULL) {
    target = *dev;
  } else {
    target = fh_tensor_device(examples[0]);
    for (int64_t i = 1; i < n; ++i)
      if (!fh_device_eq(fh_tensor_device(examples[i]), target))
        return fh_error_set(FH_ERR_VALUE,
                            "%s holds tensors on several devices (%s at %s, %s at %s); pass device= to choose the "
                            "target",
                            root, fh_device_name(target, da), fh_tree_sig_leaf_name(sig, 0, root, a, sizeof a),
                            fh_device_name(fh_tensor_device(examples[i]), db),
                            fh_tree_sig_leaf_name(sig, i, root, b, sizeof b));
  }
  if (pin && target.type != FH_DEVICE_CPU)
    return fh_error_set(FH_ERR_VALUE, "pin_memory=true requires a cpu target, got %s", fh_device_name(target, da));
  if ((st = fh_device_check(target)) != FH_OK) return st;
  for (int64_t i = 0; i < n; ++i) {
    if ((st = fh_device_check(fh_tensor_device(examples[i]))) != FH_OK) return st;
    if (fh_tensor_is_self_overlapping(examples[i]))
      return fh_error_set(FH_ERR_VALUE,
                          "%s: its elements overlap in memory (a stride-0 or expanded view); a buffer cannot hold it "
                          "(pass a contiguous() copy)",
                          fh_tree_sig_leaf_name(sig, i, root, a, sizeof a));
  }
  sp *order = fh_malloc(sizeof *order * (size_t)n);
  if (order == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory creating a buffer");
  for (int64_t i = 0; i < n; ++i) order[i] = (sp){examples[i]->storage, i};
  qsort(order, (size_t)n, sizeof *order, sp_cmp);
  for (int64_t i = 1; i < n; ++i)
    if (order[i].s == order[i - 1].s) {
      fh_tree_sig_leaf_name(sig, order[i - 1].i, root, a, sizeof a);
      fh_tree_sig_leaf_name(sig, order[i].i, root, b, sizeof b);
      fh_free(order);
      return fh_error_set(FH_ERR_VALUE,
                          "%s and %s share one storage (aliased leaves); a buffer gives every leaf its own storage, "
                          "so pass a clone() of one of them",
                          a, b);
    }
  fh_free(order);

  fh_buffer *buf = fh_calloc(1, sizeof *buf);
  fh_tensor **leaves = fh_calloc((size_t)n, sizeof *leaves);
  if (buf == NULL || leaves == NULL) {
    fh_free(buf);
    fh_free(leaves);
    return fh_error_set(FH_ERR_MEMORY, "out of memory creating a buffer");
  }
  for (int64_t i = 0; i < n && st == FH_OK; ++i) {
    st = fh_tensor_empty_like_layout(examples[i], target, pin, &leaves[i]);
    if (st != FH_OK) fh_error_prefix("%s", fh_tree_sig_leaf_name(sig, i, root, a, sizeof a));
  }
  if (st == FH_OK) st = copy_complete(leaves, examples, n, target);
  if (st != FH_OK) {
    release_all(leaves, n);
    fh_free(leaves);
    fh_free(buf);
    return st;
  }
  fh_rc_init(&buf->rc);
  buf->id = atomic_fetch_add(&g_buffer_ids, 1) + 1;
  fh_tree_sig_retain(sig);
  buf->sig = sig;
  buf->dev = target;
  buf->pinned = pin;
  buf->n = n;
  buf->leaves = leaves;
  buf->nbytes = fh_leaves_nbytes(leaves, n);
  for (int64_t i = 0; i < n; ++i) buf->storage_bytes += leaves[i]->storage->nbytes;
  *out = buf;
  return FH_OK;
}

void fh_buffer_retain(fh_buffer *b) { fh_rc_retain(&b->rc); }

static void drop_inflight(fh_buffer *b, int k) {
  if (k <= 0) return; /* also: inflight may be NULL */
  for (int i = 0; i < k; ++i) fh_copy_handle_release(b->inflight[i]);
  if (b->ninflight > k)
    memmove(b->inflight, b->inflight + k, sizeof *b->inflight * (size_t)(b->ninflight - k));
  b->ninflight -= k;
}

void fh_buffer_release(fh_buffer *b) {
  if (b == NULL || !fh_rc_release(&b->rc)) return;
  /* the GC path: never blocks. Pending handles keep the target storages
   * (and their sources) until they are released themselves; the allocator
   * guards every block a stream used. */
  drop_inflight(b, b->ninflight);
  fh_free(b->inflight);
  if (b->leaves) {
    release_all(b->leaves, b->n);
    fh_free(b->leaves);
  }
  fh_tree_sig_release(b->sig);
  fh_free(b);
}

fh_tree_sig *fh_buffer_signature(const fh_buffer *b) { return b->sig; }
fh_device fh_buffer_device(const fh_buffer *b) { return b->dev; }
bool fh_buffer_is_pinned(const fh_buffer *b) { return b->pinned; }
bool fh_buffer_is_closed(const fh_buffer *b) { return b->closed; }
uint64_t fh_buffer_id(const fh_buffer *b) { return b->id; }
int64_t fh_buffer_nleaves(const fh_buffer *b) { return b->n; }
size_t fh_buffer_nbytes(const fh_buffer *b) { return b->nbytes; }
size_t fh_buffer_storage_bytes(const fh_buffer *b) { return b->storage_bytes; }
fh_storage *fh_buffer_leaf_storage(const fh_buffer *b, int64_t i) {
  return b->leaves && i >= 0 && i < b->n ? b->leaves[i]->storage : NULL;
}

fh_status fh_buffer_check_open(const fh_buffer *b, const char *what) {
  if (!b->closed) return FH_OK;
  return fh_error_set(FH_ERR_EXECUTION, "%s: the buffer is closed", what);
}

fh_status fh_buffer_leaves(fh_buffer *b, fh_tensor **out) {
  fh_status st = fh_buffer_check_open(b, "ReusableValueBuffer.value");
  for (int64_t i = 0; i < b->n && st == FH_OK; ++i) {
    const fh_tensor *t = b->leaves[i];
    st = fh_tensor_from_storage(t->storage, t->offset, t->ndim, t->shape, t->stride, (fh_dtype)t->dtype, &out[i]);
    if (st == FH_OK) out[i]->requires_grad = t->requires_grad;
    else release_all(out, i);
  }
  return st;
}

fh_status fh_buffer_poll(fh_buffer *b) {
  if (tl_capturing) return FH_OK; /* no event queries while capturing */
  int k = 0;
  fh_status st = FH_OK;
  while (k < b->ninflight) {
    bool done = false;
    if ((st = fh_copy_handle_done(b->inflight[k], &done)) != FH_OK || !done) break;
    ++k;
  }
  drop_inflight(b, k);
  return st;
}

int fh_buffer_pending_copies(fh_buffer *b) {
  if (tl_capturing || fh__cuda_any_capture()) return -1;
  if (fh_buffer_poll(b) != FH_OK) {
    fh_error_clear();
    return -1;
  }
  return b->ninflight;
}

static fh_status handle_new(fh_buffer *b, int64_t n, fh_copy_handle **out) {
  fh_copy_handle *h = fh_calloc(1, sizeof *h);
  if (h != NULL) {
    h->sources = fh_calloc((size_t)n, sizeof *h->sources);
    h->targets = fh_calloc((size_t)n, sizeof *h->targets);
  }
  if (h == NULL || h->sources == NULL || h->targets == NULL) {
    if (h) {
      fh_free(h->sources);
      fh_free(h->targets);
    }
    fh_free(h);
    return fh_error_set(FH_ERR_MEMORY, "out of memory creating a copy handle");
  }
  fh_rc_init(&h->rc);
  h->owner = b->id;
  h->dev = b->dev;
  h->n = n;
  *out = h;
  return FH_OK;
}

static bool is_pageable_host(const fh_tensor *t) {
  return fh_tensor_device(t).type == FH_DEVICE_CPU && !fh_tensor_is_pinned(t);
}

static void handle_drop_refs(fh_copy_handle *h) {
  if (h->released) return;
  h->released = true;
  for (int64_t i = 0; i < h->n; ++i) {
    if (h->sources[i]) fh_tensor_release(h->sources[i]);
    if (h->targets[i]) fh_storage_release(h->targets[i]);
    h->sources[i] = NULL;
    h->targets[i] = NULL;
  }
}

fh_status fh_buffer_copy_from(fh_buffer *b, fh_tensor *const *src, fh_stream *stream, bool non_blocking,
                              fh_event *const *wait, int nwait, fh_copy_handle **out) {
  return fh__buffer_copy_from_named(b, src, stream, non_blocking, wait, nwait, out, "copy_from");
}

fh_status fh__buffer_copy_from_named(fh_buffer *b, fh_tensor *const *src, fh_stream *stream, bool non_blocking,
                                     fh_event *const *wait, int nwait, fh_copy_handle **out, const char *trace_name) {
  const char *fn = "ReusableValueBuffer:copy_from";
  fh_status st = fh_buffer_check_open(b, fn);
  if (st == FH_OK) st = refuse_in_capture(fn);
  if (st != FH_OK) return st;
  bool cuda = b->dev.type == FH_DEVICE_CUDA;
  if (!cuda) {
    bool waits = false;
    for (int i = 0; i < nwait; ++i) waits = waits || wait[i] != NULL;
    if (stream != NULL || waits)
      return fh_error_set(FH_ERR_VALUE,
                          "%s: the target is on cpu, where copies are synchronous; %s applies only to CUDA targets", fn,
                          stream != NULL ? "stream" : "wait_for");
  }
  for (int64_t i = 0; i < b->n; ++i)
    if ((st = fh_device_check(fh_tensor_device(src[i]))) != FH_OK) return st;
  fh_stream *s = NULL;
  if (cuda && (st = fh__op_stream(b->dev, stream, &s)) != FH_OK) {
    fh_error_prefix("%s", fn);
    return st;
  }
  if ((st = fh_buffer_poll(b)) != FH_OK) return st;
  if (b->ninflight == b->capinflight) {
    int cap = b->capinflight ? 2 * b->capinflight : 4;
    fh_copy_handle **l = fh_realloc(b->inflight, sizeof *l * (size_t)cap);
    if (l == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory tracking copies");
    b->inflight = l;
    b->capinflight = cap;
  }
  fh_copy_handle *h = NULL;
  if ((st = handle_new(b, b->n, &h)) != FH_OK) return st;
  if (cuda && (st = fh_event_new(false, &h->event)) != FH_OK) {
    fh_copy_handle_release(h);
    return st;
  }
  h->bytes = b->nbytes;
  if (cuda) {
    h->stream = s;
    fh_stream_retain(s);
    for (int i = 0; i < nwait && st == FH_OK; ++i)
      if (wait[i] != NULL) st = fh_stream_wait_event(s, wait[i]);
    /* after this buffer's previous copy (ordered copies complete in order) */
    if (st == FH_OK && b->ninflight > 0) {
      fh_copy_handle *last = b->inflight[b->ninflight - 1];
      if (last->stream != s) st = fh_stream_wait_event(s, last->event);
    }
  }
  /* from here on, bytes move (traced after the waits: the bar is the copy) */
  int tr = st == FH_OK && fh__trace_on ? fh__trace_begin(FH_TRACE_COPY, trace_name, b->dev, s) : FH_TRACE_SKIP;
  for (int64_t i = 0; i < b->n && st == FH_OK; ++i) {
    st = fh_tensor_copy_(b->leaves[i], src[i], s, cuda ? non_blocking : false);
    if (st != FH_OK) {
      char a[600];
      fh_error_prefix("%s: copying %s", fn, fh_tree_sig_leaf_name(b->sig, i, "source", a, sizeof a));
    }
  }
  if (tr != FH_TRACE_SKIP) {
    char d[160];
    fh__trace_end(tr, st == FH_OK ? b->nbytes : 0, b->n, copy_detail(d, sizeof d, b->leaves, src, b->n));
  }
  if (st == FH_OK && cuda) st = fh_event_record(h->event, s);
  if (st == FH_OK && cuda && !non_blocking) st = fh_event_synchronize(h->event);
  if (st != FH_OK) {
    /* a failed copy (a CUDA error): wait for what was enqueued before
     * dropping the sources */
    if (cuda) {
      char msg[FH_ERROR_MESSAGE_MAX];
      fh_status keep = fh_error_status();
      snprintf(msg, sizeof msg, "%s", fh_error_message());
      (void)fh_stream_synchronize(s);
      fh_error_set(keep, "%s", msg);
    }
    fh_copy_handle_release(h);
    return st;
  }
  if (cuda && non_blocking) {
    for (int64_t i = 0; i < b->n; ++i) {
      fh_storage_retain(b->leaves[i]->storage);
      h->targets[i] = b->leaves[i]->storage;
      /* a pageable host leaf is in pinned staging memory already (fh_tensor_copy_ stages
       * it before returning): nothing reads it later, so the handle does not hold it, and
       * it goes with the GC however far the device lags behind */
      if (is_pageable_host(src[i])) continue;
      fh_tensor_retain(src[i]);
      h->sources[i] = src[i];
    }
    fh_copy_handle_retain(h);
    b->inflight[b->ninflight++] = h;
  } else {
    h->released = true;
  }
  *out = h;
  return FH_OK;
}

/* Small pinned sources of replay(). A copy-engine transfer of a few KiB
 * costs little bandwidth but a lot of latency on the GPU timeline: the
 * DMA, then the compute engine waiting on the copy engine before the graph
 * launch (about 10 us on an H200, against 2-3 us for this). Leaves whose
 * source is pinned host memory (device-accessible at the same address
 * under unified addressing) with exactly the target's layout move instead
 * in one FH_K_COPY_BATCH kernel on the replay stream, at most
 * FH_COPY_BATCH_MAX leaves and COPY_BATCH_BYTES bytes per launch and
 * COPY_BATCH_BYTES per leaf; everything else (pageable or device sources,
 * large leaves) takes the ordinary copy. Same layout means the same
 * strides, so the span from element 0 to the last element is copied as raw
 * bytes (gaps included: the target storage holds exactly that span). */
#define COPY_BATCH_BYTES ((int64_t)64 << 10)

/* True when dst[i] <- src[i] goes through the batch; *bytes gets the span. */
static bool batchable(const fh_tensor *dst, const fh_tensor *src, int64_t *bytes) {
  if (!fh_tensor_is_pinned(src) || src->dtype != dst->dtype || src->ndim != dst->ndim) return false;
  for (int d = 0; d < dst->ndim; ++d)
    if (src->shape[d] != dst->shape[d] || src->stride[d] != dst->stride[d] || dst->stride[d] < 0) return false;
  int64_t span = span_elements(dst) * (int64_t)fh_dtype_size((fh_dtype)dst->dtype);
  if (span <= 0 || span > COPY_BATCH_BYTES) return false;
  if (bytes) *bytes = span;
  return true;
}

/* Launch the batches; *count gets the number of leaves copied. */
static fh_status copy_small_pinned(fh_buffer *b, fh_tensor *const *src, fh_stream *s, int64_t *count) {
  fh_copy_batch_args a;
  fh_storage *uses[2 * FH_COPY_BATCH_MAX];
  int64_t total = 0, span = 0;
  fh_status st = FH_OK;
  *count = 0;
  a.n = 0;
  a.unused = 0;
  for (int64_t i = 0; i <= b->n && st == FH_OK; ++i) {
    bool take = i < b->n && batchable(b->leaves[i], src[i], &span);
    bool full = a.n == FH_COPY_BATCH_MAX || (take && total + span > COPY_BATCH_BYTES);
    if (a.n > 0 && (full || i == b->n)) {
      /* the boundary records every use on s: the pinned sources are not
       * reused by the caching allocator before the kernel has read them */
      st = fh__submit(FH_K_COPY_BATCH, b->dev, s, &a, sizeof a, uses, 2 * a.n);
      if (st == FH_OK) *count += a.n;
      a.n = 0;
      total = 0;
    }
    if (!take || st != FH_OK) continue;
    fh_copy_seg *g = &a.seg[a.n];
    g->dst = (char *)fh_tensor_data(b->leaves[i]);
    g->src = (const char *)fh_tensor_data(src[i]);
    g->nbytes = span;
    uses[2 * a.n] = b->leaves[i]->storage;
    uses[2 * a.n + 1] = src[i]->storage;
    a.n++;
    total += span;
  }
  return st;
}

fh_status fh__buffer_copy_ordered(fh_buffer *b, fh_tensor *const *src, fh_stream *s, fh_event *wait,
                                  const char *what) {
  const char *fn = what ? what : "replay";
  fh_status st = fh_buffer_check_open(b, fn);
  if (st == FH_OK) st = refuse_in_capture(fn);
  if (st != FH_OK) return st;
  bool cuda = b->dev.type == FH_DEVICE_CUDA;
  if (cuda != (s != NULL)) return fh_error_set(FH_ERR_EXECUTION, "%s: internal stream mismatch", fn);
  for (int64_t i = 0; i < b->n; ++i)
    if ((st = fh_device_check(fh_tensor_device(src[i]))) != FH_OK) return st;
  if (cuda) {
    if ((st = fh_buffer_poll(b)) != FH_OK) return st;
    if (wait != NULL && (st = fh_stream_wait_event(s, wait)) != FH_OK) return st;
    if (b->ninflight > 0) {
      fh_copy_handle *last = b->inflight[b->ninflight - 1];
      if (last->stream != s && (st = fh_stream_wait_event(s, last->event)) != FH_OK) return st;
    }
  }
  int64_t nbatched = 0;
  int tr = fh__trace_on ? fh__trace_begin(FH_TRACE_COPY, "replay inputs", b->dev, s) : FH_TRACE_SKIP;
  if (cuda && (st = copy_small_pinned(b, src, s, &nbatched)) != FH_OK) fh_error_prefix("%s: copying small pinned inputs", fn);
  for (int64_t i = 0; i < b->n && st == FH_OK; ++i) {
    if (cuda && nbatched > 0 && batchable(b->leaves[i], src[i], NULL)) continue; /* copied above */
    /* the allocators guard the sources (record-stream; pageable sources are
     * staged before this returns) until the copy has run */
    st = fh_tensor_copy_(b->leaves[i], src[i], s, cuda);
    if (st != FH_OK) {
      char a[600];
      fh_error_prefix("%s: copying %s", fn, fh_tree_sig_leaf_name(b->sig, i, "inputs", a, sizeof a));
    }
  }
  if (tr != FH_TRACE_SKIP) {
    char d[160];
    fh__trace_end(tr, st == FH_OK ? b->nbytes : 0, b->n, copy_detail(d, sizeof d, b->leaves, src, b->n));
  }
  return st;
}

fh_status fh_buffer_wait_for(fh_buffer *b, fh_copy_handle *h, fh_stream *stream) {
  const char *fn = "ReusableValueBuffer:wait_for";
  fh_status st = fh_buffer_check_open(b, fn);
  if (st != FH_OK) return st;
  if (h->owner != b->id)
    return fh_error_set(FH_ERR_EXEC_INPUT, "%s: the CopyHandle belongs to another buffer (it came from that buffer's "
                                           "copy_from)", fn);
  if (b->dev.type == FH_DEVICE_CPU) {
    if (stream != NULL)
      return fh_error_set(FH_ERR_VALUE, "%s: the target is on cpu, where copies are synchronous; there is no stream "
                                        "to order", fn);
    return FH_OK;
  }
  fh_stream *s = NULL;
  if ((st = fh__op_stream(b->dev, stream, &s)) != FH_OK) {
    fh_error_prefix("%s", fn);
    return st;
  }
  return fh_stream_wait_event(s, h->event);
}

fh_status fh_buffer_close(fh_buffer *b) {
  if (b->closed) return FH_OK;
  fh_status st = FH_OK;
  if (b->ninflight > 0) {
    /* copies complete in order: the last one's event covers all */
    st = fh_copy_handle_synchronize(b->inflight[b->ninflight - 1]);
    if (st != FH_OK) {
      /* a broken context runs none of the copies again: close all the same */
      if (!fh__device_is_broken(fh_buffer_device(b))) return st;
      fh_error_clear();
    }
    for (int i = 0; i < b->ninflight; ++i) handle_drop_refs(b->inflight[i]);
    drop_inflight(b, b->ninflight);
  }
  b->closed = true;
  release_all(b->leaves, b->n);
  fh_free(b->leaves);
  b->leaves = NULL;
  return FH_OK;
}

/* ---- copy handles -------------------------------------------------------------------- */
void fh_copy_handle_retain(fh_copy_handle *h) { fh_rc_retain(&h->rc); }

void fh_copy_handle_release(fh_copy_handle *h) {
  if (h == NULL || !fh_rc_release(&h->rc)) return;
  /* the GC path: references go back without waiting; the allocators guard
   * blocks still used by the copy's stream */
  handle_drop_refs(h);
  if (h->event) fh_event_release(h->event);
  if (h->stream) fh_stream_release(h->stream);
  fh_free(h->sources);
  fh_free(h->targets);
  fh_free(h);
}

fh_event *fh_copy_handle_event(const fh_copy_handle *h) { return h->event; }
fh_device fh_copy_handle_device(const fh_copy_handle *h) { return h->dev; }
size_t fh_copy_handle_bytes(const fh_copy_handle *h) { return h->bytes; }
uint64_t fh_copy_handle_owner(const fh_copy_handle *h) { return h->owner; }
fh_stream *fh_copy_handle_stream(const fh_copy_handle *h) { return h->stream; }
bool fh_copy_handle_released(const fh_copy_handle *h) { return h->released; }
bool fh_copy_handle_holds_source(const fh_copy_handle *h, int64_t i) {
  return !h->released && i >= 0 && i < h->n && h->sources[i] != NULL;
}

fh_status fh_copy_handle_done(fh_copy_handle *h, bool *done) {
  if (h->released || h->event == NULL) {
    *done = true;
    return FH_OK;
  }
  fh_status st = refuse_in_capture("CopyHandle:done");
  if (st == FH_OK) st = fh_event_query(h->event, done);
  if (st == FH_OK && *done) handle_drop_refs(h);
  return st;
}

fh_status fh_copy_handle_wait_on(fh_copy_handle *h, fh_stream *s) {
  char a[FH_DEVICE_NAME_MAX], b[FH_DEVICE_NAME_MAX];
  if (!fh_device_eq(fh_stream_device(s), h->dev))
    return fh_error_set(FH_ERR_VALUE, "CopyHandle:wait_on: the stream belongs to %s but the copy targeted %s%s",
                        fh_device_name(fh_stream_device(s), a), fh_device_name(h->dev, b),
                        h->dev.type == FH_DEVICE_CPU ? " (a cpu copy is complete when copy_from returns)" : "");
  return fh_stream_wait_event(s, h->event);
}

fh_status fh_copy_handle_synchronize(fh_copy_handle *h) {
  if (h->released || h->event == NULL) {
    handle_drop_refs(h);
    return FH_OK;
  }
  fh_status st = refuse_in_capture("CopyHandle:synchronize");
  if (st == FH_OK) st = fh_event_synchronize(h->event);
  if (st == FH_OK) handle_drop_refs(h);
  return st;
}
