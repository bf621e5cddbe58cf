/* CUDA graph back end of programs (fh/program.h): thread-local stream
 * capture, the unjoined-fork check, instantiation and launch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "fh/program.h"

struct fh__graph {
  int dev;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
};

static fh_status capture_error(const char *msg, cudaError_t e) {
  fh_error_set(FH_ERR_CAPTURE, "%s (%s: %s)", msg, cudaGetErrorName(e), cudaGetErrorString(e));
  fh_error_set_stage("capture");
  return FH_ERR_CAPTURE;
}

fh_status fh__graph_begin(fh_stream *s) {
  if (fh_stream_is_default(s)) return fh_error_set(FH_ERR_VALUE, "the legacy default stream cannot capture");
  fh_status st = fh__cuda_use_device(fh_stream_device(s).index);
  if (st != FH_OK) return st;
  cudaError_t e = cudaStreamBeginCapture((cudaStream_t)fh_stream_handle(s), cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) return fh__cuda_fail(e, "cudaStreamBeginCapture");
  return FH_OK;
}

/* ---- the unjoined-fork check ------------------------------------------------------- */
/* A set of graph nodes (open addressing). */
typedef struct nodeset {
  cudaGraphNode_t *slot;
  size_t cap, n;
} nodeset;

static size_t node_hash(const void *p, size_t cap) {
  uintptr_t x = (uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x & (cap - 1);
}

static bool set_has(const nodeset *s, cudaGraphNode_t n) {
  if (s->cap == 0) return false;
  for (size_t j = node_hash(n, s->cap); s->slot[j]; j = (j + 1) & (s->cap - 1))
    if (s->slot[j] == n) return true;
  return false;
}

/* Add n; returns 1 when added, 0 when present, -1 out of memory. */
static int set_add(nodeset *s, cudaGraphNode_t n) {
  if (set_has(s, n)) return 0;
  if (2 * (s->n + 1) > s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 256;
    cudaGraphNode_t *slot = (cudaGraphNode_t *)fh_calloc(cap, sizeof *slot);
    if (slot == NULL) return -1;
    for (size_t i = 0; i < s->cap; ++i)
      if (s->slot[i]) {
        size_t j = node_hash(s->slot[i], cap);
        while (slot[j]) j = (j + 1) & (cap - 1);
        slot[j] = s->slot[i];
      }
    fh_free(s->slot);
    s->slot = slot;
    s->cap = cap;
  }
  size_t j = node_hash(n, s->cap);
  while (s->slot[j]) j = (j + 1) & (s->cap - 1);
  s->slot[j] = n;
  s->n++;
  return 1;
}

/* Every node the capture stream's next node will depend on, transitively.
 * Returns false when the graph cannot be walked (then nothing is named). */
static bool ancestors(cudaStream_t s, unsigned long long *id, nodeset *seen) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaGraph_t g = NULL;
  const cudaGraphNode_t *deps = NULL;
  size_t nd = 0;
  if (cudaStreamGetCaptureInfo(s, &cs, id, &g, &deps, NULL, &nd) != cudaSuccess || cs != cudaStreamCaptureStatusActive)
    return false;
  size_t cap = nd + 64, top = 0;
  cudaGraphNode_t *stack = (cudaGraphNode_t *)fh_malloc(cap * sizeof *stack);
  if (stack == NULL) return false;
  for (size_t i = 0; i < nd; ++i)
    if (set_add(seen, deps[i]) == 1) stack[top++] = deps[i];
  bool ok = true;
  cudaGraphNode_t *buf = NULL;
  size_t bufcap = 0;
  while (ok && top > 0) {
    cudaGraphNode_t n = stack[--top];
    size_t k = 0;
    if (cudaGraphNodeGetDependencies(n, NULL, NULL, &k) != cudaSuccess) {
      ok = false;
      break;
    }
    if (k > bufcap) {
      cudaGraphNode_t *b = (cudaGraphNode_t *)fh_realloc(buf, k * sizeof *b);
      if (b == NULL) {
        ok = false;
        break;
      }
      buf = b;
      bufcap = k;
    }
    if (k > 0 && cudaGraphNodeGetDependencies(n, buf, NULL, &k) != cudaSuccess) {
      ok = false;
      break;
    }
    for (size_t i = 0; i < k && ok; ++i) {
      int r = set_add(seen, buf[i]);
      if (r < 0) ok = false;
      if (r != 1) continue;
      if (top == cap) {
        cudaGraphNode_t *t = (cudaGraphNode_t *)fh_realloc(stack, 2 * cap * sizeof *t);
        if (t == NULL) {
          ok = false;
          break;
        }
        stack = t;
        cap *= 2;
      }
      stack[top++] = buf[i];
    }
  }
  fh_free(buf);
  fh_free(stack);
  (void)cudaGetLastError();
  return ok;
}

/* Join fork `f` into the capture stream `s` (an event recorded on f, waited
 * on by s), so that ending the capture releases every stream cleanly. */
static void join(cudaStream_t s, cudaStream_t f) {
  cudaEvent_t ev = NULL;
  if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (cudaEventRecord(ev, f) == cudaSuccess) (void)cudaStreamWaitEvent(s, ev, 0);
  (void)cudaEventDestroy(ev);
  (void)cudaGetLastError();
}

/* Names the forks whose last captured work the capture stream does not
 * depend on into msg, and joins them (the capture is discarded anyway);
 * returns how many. */
static int unjoined_forks(fh_stream *s, fh_stream *const *forks, int nforks, char *msg, size_t size) {
  if (nforks == 0) return 0;
  nodeset seen = {NULL, 0, 0};
  unsigned long long id = 0;
  int bad = 0;
  size_t l = 0;
  msg[0] = '\0';
  if (ancestors((cudaStream_t)fh_stream_handle(s), &id, &seen)) {
    for (int f = 0; f < nforks; ++f) {
      cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
      unsigned long long fid = 0;
      const cudaGraphNode_t *deps = NULL;
      size_t nd = 0;
      cudaStream_t h = (cudaStream_t)fh_stream_handle(forks[f]);
      if (h == NULL || cudaStreamGetCaptureInfo(h, &cs, &fid, NULL, &deps, NULL, &nd) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      if (cs != cudaStreamCaptureStatusActive || fid != id) continue;
      bool joined = true;
      for (size_t i = 0; i < nd && joined; ++i) joined = set_has(&seen, deps[i]);
      if (joined) continue;
      join((cudaStream_t)fh_stream_handle(s), h);
      char dn[FH_DEVICE_NAME_MAX];
      if (l < size)
        l += (size_t)snprintf(msg + l, size - l, "%sstream %llu (%s)", bad ? ", " : "",
                              (unsigned long long)fh_stream_id(forks[f]), fh_device_name(fh_stream_device(forks[f]), dn));
      ++bad;
    }
  }
  fh_free(seen.slot);
  (void)cudaGetLastError();
  return bad;
}

fh_status fh__graph_end(fh_stream *s, fh_stream *const *forks, int nforks, bool keep, fh__graph **out) {
  *out = NULL;
  int dev = fh_stream_device(s).index;
  fh_status st = fh__cuda_use_device(dev);
  if (st != FH_OK) return st;
  char names[512];
  int bad = keep ? unjoined_forks(s, forks, nforks, names, sizeof names) : 0;
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture((cudaStream_t)fh_stream_handle(s), &g);
  if (e != cudaSuccess || !keep || bad) {
    if (g) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
    if (!keep) return FH_OK;
    if (bad) {
      fh_error_set(FH_ERR_CAPTURE,
                   "the captured function left work on %d forked stream%s that was not joined back into the capture "
                   "stream: %s; before returning, make the capture stream wait on each fork "
                   "(fh.cuda.current_stream():wait_stream(s))",
                   bad, bad > 1 ? "s" : "", names);
      fh_error_set_stage("capture");
      return FH_ERR_CAPTURE;
    }
    if (e == cudaErrorStreamCaptureUnjoined)
      return capture_error("work forked to another stream during the capture was not joined back into the capture "
                           "stream; make the capture stream wait on every stream that waited on it",
                           e);
    if (e == cudaErrorStreamCaptureInvalidated)
      return capture_error("the capture was invalidated by an operation that cannot be captured (a synchronize, a "
                           "blocking copy or a host read of device data inside the captured function)",
                           e);
    return capture_error("ending the capture failed", e);
  }
  if (g == NULL) return capture_error("the capture produced no graph", cudaErrorStreamCaptureInvalidated);
  fh__graph *r = (fh__graph *)fh_calloc(1, sizeof *r);
  if (r == NULL) {
    (void)cudaGraphDestroy(g);
    return fh_error_set(FH_ERR_MEMORY, "out of memory keeping a graph");
  }
  r->dev = dev;
  r->graph = g;
  *out = r;
  return FH_OK;
}

fh_status fh__graph_instantiate(fh__graph *g, uint64_t *nodes) {
  fh_status st = fh__cuda_use_device(g->dev);
  if (st != FH_OK) return st;
  size_t n = 0;
  FH_CUDA_TRY(cudaGraphGetNodes(g->graph, NULL, &n), "cudaGraphGetNodes");
  /* FHELIUM_GRAPH_DOT=<prefix>: write each captured graph as Graphviz
   * (<prefix><n>.dot, verbose: kernel names, grids, parameters) to debug
   * what a capture recorded. */
  const char *dot = getenv("FHELIUM_GRAPH_DOT");
  if (dot != NULL && *dot) {
    static int count;
    char path[1024];
    snprintf(path, sizeof path, "%s%d.dot", dot, count++);
    (void)cudaGraphDebugDotPrint(g->graph, path, cudaGraphDebugDotFlagsVerbose);
  }
  FH_CUDA_TRY(cudaGraphInstantiate(&g->exec, g->graph, 0), "cudaGraphInstantiate");
  /* the executable graph is independent of the template */
  (void)cudaGraphDestroy(g->graph);
  g->graph = NULL;
  *nodes = n;
  return FH_OK;
}

fh_status fh__graph_launch(fh__graph *g, fh_stream *s) {
  fh_status st = fh__cuda_use_device(g->dev);
  if (st != FH_OK) return st;
  FH_CUDA_TRY(cudaGraphLaunch(g->exec, (cudaStream_t)fh_stream_handle(s)), "cudaGraphLaunch");
  return FH_OK;
}

void fh__graph_free(fh__graph *g) {
  if (g == NULL) return;
  fh_error_saved keep;
  fh_error_save(&keep);
  if (fh__cuda_use_device(g->dev) == FH_OK) {
    /* an executable graph destroyed while in flight is freed on completion */
    if (g->exec) (void)cudaGraphExecDestroy(g->exec);
    if (g->graph) (void)cudaGraphDestroy(g->graph);
  }
  (void)cudaGetLastError();
  fh_error_restore(&keep);
  fh_free(g);
}
