/* fhelium_bench_gap_probe: which plain CUDA calls slow the replay of a CUDA
 * graph launched afterwards in the same process (scripts/bench/README.md,
 * "The two-stream state"). Usage: fhelium_bench_gap_probe <action>
 * Measures a K = 100 graph of timestamped adds (its own buffers, a fresh
 * non-blocking stream, as graph_gap.lua's probe does) before and after the
 * action, and prints
 *   <action> <us per replay before> <after> <gap ns before> <after> <kernel ns before> <after>
 * where the gap is the mean time from one kernel's last block end to the
 * next kernel's first block start (globaltimer). The actions are sequences
 * of plain CUDA calls, each a piece of what a fhelium program capture does;
 * `fhelium_bench_gap_probe list` names them. Built by CMake when CUDA is on. */
#include "bench_common.h"

static __global__ void plain_add(float *out, const float *a, const float *b, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = a[i] + b[i];
}

enum { N = 4096, K = 100 };

typedef struct probe {
  double us, gap_ns, kernel_ns;
} probe;

/* the measuring stream and graph: GAP_PRIO=<p> creates it with priority p
 * (default: cudaStreamCreateWithFlags); GAP_STREAM=legacy launches on the
 * legacy default stream (captured on a fresh one); GAP_FLAGS=<n> passes n to
 * cudaGraphInstantiateWithFlags; GAP_UPLOAD=1 uploads the graph first. */
static int env_int(const char *k, int dflt) {
  const char *v = getenv(k);
  return v && *v ? atoi(v) : dflt;
}

static probe measure(void) {
  cudaStream_t s, ls;
  float *buf, *w;
  unsigned long long *st, h[2 * K];
  if (getenv("GAP_PRIO")) CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, env_int("GAP_PRIO", 0)));
  else CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const char *gs = getenv("GAP_STREAM");
  ls = gs && strcmp(gs, "legacy") == 0 ? (cudaStream_t)0 : s;
  CHECK(cudaMalloc((void **)&buf, (size_t)(K + 1) * N * sizeof(float)));
  CHECK(cudaMalloc((void **)&w, N * sizeof(float)));
  CHECK(cudaMalloc((void **)&st, sizeof h));
  CHECK(cudaMemset(buf, 0, (size_t)(K + 1) * N * sizeof(float)));
  CHECK(cudaMemset(w, 0, N * sizeof(float)));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < K; ++k)
    fh_probe_stamped_add<<<16, 256, 0, s>>>(buf + (size_t)(k + 1) * N, buf + (size_t)k * N, w, N, st + 2 * k,
                                             st + 2 * k + 1);
  cudaGraph_t g;
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t x;
  CHECK(cudaGraphInstantiateWithFlags(&x, g, (unsigned long long)env_int("GAP_FLAGS", 0)));
  if (env_int("GAP_UPLOAD", 0)) CHECK(cudaGraphUpload(x, ls));
  double t[15], gap[15], dur[15];
  for (int r = -3; r < 15; ++r) {
    CHECK(cudaStreamSynchronize(ls));
    double t0 = now_us();
    for (int j = 0; j < 200; ++j) CHECK(cudaGraphLaunch(x, ls));
    CHECK(cudaStreamSynchronize(ls));
    if (r < 0) continue;
    t[r] = (now_us() - t0) / 200;
    for (int k = 0; k < K; ++k) h[2 * k] = ~0ULL, h[2 * k + 1] = 0;
    CHECK(cudaMemcpyAsync(st, h, sizeof h, cudaMemcpyHostToDevice, ls));
    CHECK(cudaGraphLaunch(x, ls));
    CHECK(cudaMemcpyAsync(h, st, sizeof h, cudaMemcpyDeviceToHost, ls));
    CHECK(cudaStreamSynchronize(ls));
    fh_probe_summarize(h, K, &dur[r], &gap[r]);
  }
  CHECK(cudaGraphExecDestroy(x));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFree(buf));
  CHECK(cudaFree(w));
  CHECK(cudaFree(st));
  CHECK(cudaStreamDestroy(s));
  probe p = {median(t, 15), median(gap, 15), median(dur, 15)};
  return p;
}

/* ---- actions ---- */
static float *A, *B, *C;

static void launches(cudaStream_t s, int n) {
  for (int i = 0; i < n; ++i) plain_add<<<16, 256, 0, s>>>(A, A, B, N);
  CHECK(cudaGetLastError());
}
static cudaStream_t fresh(void) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, 0));
  return s;
}
/* capture n launches on s, instantiate, launch once, synchronize, destroy */
static void capture_on(cudaStream_t s, int n) {
  cudaGraph_t g;
  cudaGraphExec_t x;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  launches(s, n);
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&x, g, 0));
  CHECK(cudaGraphLaunch(x, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaGraphExecDestroy(x));
  CHECK(cudaGraphDestroy(g));
}

static void a_none(void) {}
static void a_legacy(void) {
  launches(0, 100);
  CHECK(cudaDeviceSynchronize());
}
static void a_stream(void) {
  cudaStream_t s = fresh();
  launches(s, 100);
  CHECK(cudaStreamSynchronize(s));
}
static void a_stream_destroyed(void) {
  cudaStream_t s = fresh();
  launches(s, 100);
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaStreamDestroy(s));
}
static void a_legacy_then_stream(void) {
  launches(0, 100);
  CHECK(cudaDeviceSynchronize());
  a_stream();
}
static void a_d2d(void) {
  CHECK(cudaMemcpyAsync(C, A, N * sizeof(float), cudaMemcpyDeviceToDevice, 0));
  CHECK(cudaDeviceSynchronize());
}
static void a_d2d_then_stream(void) {
  a_d2d();
  a_stream();
}
static void a_two_streams(void) {
  a_stream();
  a_stream();
}
static void a_stream_capture(void) {
  cudaStream_t s = fresh();
  launches(s, 100);
  CHECK(cudaStreamSynchronize(s));
  capture_on(s, 100);
}
static void a_capture_only(void) {
  cudaStream_t s = fresh();
  capture_on(s, 100);
}
static void a_event_xstream(void) {
  cudaEvent_t e;
  CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  launches(0, 10);
  CHECK(cudaEventRecord(e, 0));
  cudaStream_t s = fresh();
  CHECK(cudaStreamWaitEvent(s, e, 0));
  launches(s, 100);
  CHECK(cudaEventRecord(e, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaEventQuery(e));
}
static void a_many_streams(void) {
  cudaStream_t s[40];
  for (int i = 0; i < 40; ++i) {
    s[i] = fresh();
    launches(s[i], 3);
  }
  CHECK(cudaDeviceSynchronize());
}
static void a_streams_idle(void) {
  for (int i = 0; i < 40; ++i) (void)fresh();
}

static void a_two_streams_destroyed(void) {
  a_stream_destroyed();
  a_stream_destroyed();
}
static void a_same_stream_twice(void) {
  cudaStream_t s = fresh();
  launches(s, 100);
  CHECK(cudaStreamSynchronize(s));
  launches(s, 100);
  CHECK(cudaStreamSynchronize(s));
}
static void a_two_streams_one_launch(void) {
  cudaStream_t s1 = fresh(), s2 = fresh();
  launches(s1, 1);
  CHECK(cudaStreamSynchronize(s1));
  launches(s2, 1);
  CHECK(cudaStreamSynchronize(s2));
}
static void a_two_streams_sleep(void) {
  a_two_streams();
  struct timespec ts = {2, 0};
  nanosleep(&ts, NULL);
}
static void a_memset_two_streams(void) {
  cudaStream_t s1 = fresh(), s2 = fresh();
  CHECK(cudaMemsetAsync(C, 0, N * sizeof(float), s1));
  CHECK(cudaStreamSynchronize(s1));
  CHECK(cudaMemsetAsync(C, 0, N * sizeof(float), s2));
  CHECK(cudaStreamSynchronize(s2));
}
static void a_memset_then_stream(void) {
  cudaStream_t s1 = fresh();
  CHECK(cudaMemsetAsync(C, 0, N * sizeof(float), s1));
  CHECK(cudaStreamSynchronize(s1));
  a_stream();
}
/* graphs (not eager launches) on two fresh streams */
static void a_graphs_two_streams(void) {
  capture_on(fresh(), 100);
  capture_on(fresh(), 100);
}
static void a_three_streams(void) {
  a_stream();
  a_stream();
  a_stream();
}

/* GAP_N (default 100) launches on one fresh stream, then GAP_M (default
 * GAP_N) on another: where the threshold lies */
static void a_two_streams_n(void) {
  int n = env_int("GAP_N", 100), m = env_int("GAP_M", n);
  cudaStream_t s1 = fresh(), s2 = fresh();
  launches(s1, n);
  CHECK(cudaStreamSynchronize(s1));
  launches(s2, m);
  CHECK(cudaStreamSynchronize(s2));
}
/* GAP_N launches alternating between two fresh streams, no synchronization
 * between them */
static void a_alternate_n(void) {
  int n = env_int("GAP_N", 100);
  cudaStream_t s[2] = {fresh(), fresh()};
  for (int i = 0; i < n; ++i) launches(s[i & 1], 1);
  CHECK(cudaDeviceSynchronize());
}

typedef struct action {
  const char *name, *what;
  void (*fn)(void);
} action;
static const action actions[] = {
    {"none", "nothing", a_none},
    {"legacy", "100 launches on the legacy default stream", a_legacy},
    {"stream", "100 launches on a fresh non-blocking stream (kept)", a_stream},
    {"stream_destroyed", "100 launches on a fresh non-blocking stream, destroyed", a_stream_destroyed},
    {"legacy_then_stream", "100 legacy launches, then 100 on a fresh stream", a_legacy_then_stream},
    {"d2d", "one device-to-device cudaMemcpyAsync on the legacy stream", a_d2d},
    {"d2d_then_stream", "a D2D copy on the legacy stream, then 100 launches on a fresh stream", a_d2d_then_stream},
    {"two_streams", "100 launches on each of two fresh streams", a_two_streams},
    {"stream_capture", "100 launches on a fresh stream, then a capture of 100 on it", a_stream_capture},
    {"capture_only", "a capture of 100 launches on a fresh stream", a_capture_only},
    {"event_xstream", "a fresh stream waits on an event of the legacy stream, 100 launches", a_event_xstream},
    {"many_streams", "40 fresh streams with 3 launches each", a_many_streams},
    {"streams_idle", "40 fresh streams, no work", a_streams_idle},
    {"two_streams_destroyed", "100 launches on each of two fresh streams, each destroyed", a_two_streams_destroyed},
    {"same_stream_twice", "100 launches on one fresh stream, twice", a_same_stream_twice},
    {"two_streams_one_launch", "one launch on each of two fresh streams", a_two_streams_one_launch},
    {"two_streams_sleep", "two_streams, then 2 s of sleep", a_two_streams_sleep},
    {"memset_two_streams", "a cudaMemsetAsync on each of two fresh streams", a_memset_two_streams},
    {"memset_then_stream", "a cudaMemsetAsync on a fresh stream, then 100 launches on another", a_memset_then_stream},
    {"graphs_two_streams", "a captured graph of 100 launches launched on each of two fresh streams", a_graphs_two_streams},
    {"two_streams_n", "GAP_N launches on a fresh stream, then GAP_M on another", a_two_streams_n},
    {"alternate_n", "GAP_N launches alternating between two fresh streams", a_alternate_n},
    {"three_streams", "100 launches on each of three fresh streams", a_three_streams},
};
enum { NACTIONS = sizeof actions / sizeof actions[0] };

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <action>|list\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[1], "list") == 0) {
    for (int i = 0; i < NACTIONS; ++i) printf("%s\t%s\n", actions[i].name, actions[i].what);
    return 0;
  }
  const action *a = NULL;
  for (int i = 0; i < NACTIONS; ++i)
    if (strcmp(argv[1], actions[i].name) == 0) a = &actions[i];
  if (a == NULL) {
    fprintf(stderr, "unknown action %s (list names them)\n", argv[1]);
    return 2;
  }
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc((void **)&A, N * sizeof(float)));
  CHECK(cudaMalloc((void **)&B, N * sizeof(float)));
  CHECK(cudaMalloc((void **)&C, N * sizeof(float)));
  CHECK(cudaMemset(A, 0, N * sizeof(float)));
  CHECK(cudaMemset(B, 0, N * sizeof(float)));
  CHECK(cudaDeviceSynchronize());
  probe p0 = measure();
  a->fn();
  CHECK(cudaDeviceSynchronize());
  probe p1 = measure();
  printf("%-20s %8.2f %8.2f us  gap %5.0f %5.0f ns  kernel %5.0f %5.0f ns  %s\n", a->name, p0.us, p1.us, p0.gap_ns,
         p1.gap_ns, p0.kernel_ns, p1.kernel_ns, a->what);
  return 0;
}
