/* fhelium_bench_baseline: the plain CUDA C side of scripts/bench/bench.lua.
 * Prints "key value" lines:
 *   eager_c_us        100 launches of the engine's add kernel (4096 float32,
 *                     preallocated out) from a C loop through the same kernel
 *                     function the launch boundary calls, then a synchronize:
 *                     microseconds per loop (median)
 *   eager_c_enqueue_us  the same, host time to enqueue the 100 launches
 *   eager_raw_us      100 direct <<<>>> launches of an equivalent add kernel
 *   eager_boundary_us 100 fh_launch_submit calls (the launch boundary:
 *                     record-stream of the 3 storages, then the kernel)
 *   eager_engine_us   100 fh_binary calls on fh_tensor objects with out
 *                     (the engine's validation, no Lua)
 *   h2d_pinned_gbs, d2h_pinned_gbs, h2d_pageable_gbs, d2h_pageable_gbs,
 *   d2d_gbs           cudaMemcpyAsync of 256 MiB (bytes counted once), GB/s
 * With the argument "eager", only the eager measures.
 * Built by CMake (target fhelium_bench_baseline) when CUDA is on. */
#include "bench_common.h"
#include "fh/internal.h"
#include "fh/tensor.h"

__global__ void raw_add(float *o, const float *a, const float *b, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    o[i] = __fadd_rn(a[i], b[i]);
}

#define REPS 200
#define K 100

int main(int argc, char **argv) {
  int eager_only = argc > 1 && strcmp(argv[1], "eager") == 0;
  CHECK(cudaSetDevice(0));
  const int n = 4096;
  float *a, *b, *o;
  CHECK(cudaMalloc((void **)&a, n * sizeof(float)));
  CHECK(cudaMalloc((void **)&b, n * sizeof(float)));
  CHECK(cudaMalloc((void **)&o, n * sizeof(float)));
  CHECK(cudaMemset(a, 0, n * sizeof(float)));
  CHECK(cudaMemset(b, 0, n * sizeof(float)));
  fh_ew_args args = bench_add_args(o, a, b, n);
  fh_cuda_kernel_fn fn = fh__tensor_cuda_kernels[FH_K_BINARY];
  double tot[REPS], enq[REPS], raw[REPS];
  for (int r = -20; r < REPS; ++r) {
    CHECK(cudaDeviceSynchronize());
    double t0 = now_us();
    for (int k = 0; k < K; ++k)
      if (fn(&args, NULL) != FH_OK) {
        fprintf(stderr, "kernel launch failed\n");
        return 1;
      }
    double t1 = now_us();
    CHECK(cudaStreamSynchronize(0));
    double t2 = now_us();
    if (r >= 0) tot[r] = t2 - t0, enq[r] = t1 - t0;
  }
  for (int r = -20; r < REPS; ++r) {
    CHECK(cudaDeviceSynchronize());
    double t0 = now_us();
    for (int k = 0; k < K; ++k) raw_add<<<16, 256>>>(o, a, b, n);
    CHECK(cudaStreamSynchronize(0));
    if (r >= 0) raw[r] = now_us() - t0;
  }
  /* the same through the launch boundary and through the engine operator */
  fh_tensor_options to = {FH_FLOAT32, {FH_DEVICE_CUDA, 0}, false, false};
  int64_t shape[1] = {n};
  fh_tensor *ta, *tb, *tc;
  if (fh_tensor_empty(1, shape, &to, &ta) || fh_tensor_empty(1, shape, &to, &tb) || fh_tensor_empty(1, shape, &to, &tc)) {
    fprintf(stderr, "fh_tensor_empty: %s\n", fh_error_message());
    return 1;
  }
  fh_ew_args targs = args;
  targs.out.data = fh_tensor_data(tc);
  targs.a.data = fh_tensor_data(ta);
  targs.b.data = fh_tensor_data(tb);
  fh_stream *cur;
  if (fh_stream_current(fh_tensor_device(ta), &cur)) return 1;
  fh_storage *uses[3] = {tc->storage, ta->storage, tb->storage};
  double bnd[REPS], eng[REPS];
  for (int r = -20; r < REPS; ++r) {
    CHECK(cudaDeviceSynchronize());
    double t0 = now_us();
    for (int k = 0; k < K; ++k)
      if (fh__submit(FH_K_BINARY, fh_tensor_device(ta), cur, &targs, sizeof targs, uses, 3) != FH_OK) return 1;
    CHECK(cudaStreamSynchronize(0));
    if (r >= 0) bnd[r] = now_us() - t0;
  }
  for (int r = -20; r < REPS; ++r) {
    CHECK(cudaDeviceSynchronize());
    double t0 = now_us();
    for (int k = 0; k < K; ++k) {
      fh_tensor *res;
      if (fh_binary(FH_OP_ADD, ta, tb, NULL, false, tc, &res) != FH_OK) return 1;
      fh_tensor_release(res);
    }
    CHECK(cudaStreamSynchronize(0));
    if (r >= 0) eng[r] = now_us() - t0;
  }
  printf("eager_boundary_us %.3f\n", median(bnd, REPS));
  printf("eager_engine_us %.3f\n", median(eng, REPS));
  printf("eager_c_us %.3f\n", median(tot, REPS));
  printf("eager_c_enqueue_us %.3f\n", median(enq, REPS));
  printf("eager_raw_us %.3f\n", median(raw, REPS));
  if (eager_only) return 0;

  const size_t N = (size_t)256 << 20;
  void *d, *d2, *hp, *hpage;
  CHECK(cudaMalloc(&d, N));
  CHECK(cudaMalloc(&d2, N));
  CHECK(cudaHostAlloc(&hp, N, cudaHostAllocPortable));
  hpage = malloc(N);
  if (hpage == NULL) return 1;
  memset(hpage, 1, N);
  memset(hp, 1, N);
  struct {
    const char *name;
    void *dst;
    const void *src;
    cudaMemcpyKind kind;
  } cases[] = {
      {"h2d_pinned_gbs", d, hp, cudaMemcpyHostToDevice},
      {"d2h_pinned_gbs", hp, d, cudaMemcpyDeviceToHost},
      {"h2d_pageable_gbs", d, hpage, cudaMemcpyHostToDevice},
      {"d2h_pageable_gbs", hpage, d, cudaMemcpyDeviceToHost},
      {"d2d_gbs", d2, d, cudaMemcpyDeviceToDevice},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    double t[9];
    for (int r = -2; r < 9; ++r) {
      CHECK(cudaDeviceSynchronize());
      double t0 = now_us();
      CHECK(cudaMemcpyAsync(cases[c].dst, cases[c].src, N, cases[c].kind, 0));
      CHECK(cudaStreamSynchronize(0));
      if (r >= 0) t[r] = now_us() - t0;
    }
    printf("%s %.2f\n", cases[c].name, (double)N / median(t, 9) / 1e3);
  }
  return 0;
}
