/* scripts/bench/dist_baseline.c: the plain C all-reduce that
 * scripts/bench/distributed.lua compares fh.distributed.all_reduce with, in
 * the same run: a loop over ncclAllReduce (one GPU per rank, the
 * communicator bootstrapped from MPI: rank 0's ncclUniqueId broadcast over
 * MPI_COMM_WORLD), or over MPI_Allreduce on host memory (CPU ranks). Built by
 * CMake when MPI is found (NCCL part when NCCL is). Run it under mpirun:
 *   scripts/launch -n 2 --exec build/fhelium_bench_dist_baseline -- cuda 67108864 20
 * Arguments: cpu|cuda, bytes of uint64 elements, iterations. Prints on rank
 * 0 "baseline_us <median us per all-reduce>" over 5 rounds after warm-up,
 * each round `iterations` back-to-back calls then a synchronize.
 * Out of place, sum of uint64, as fh.distributed.all_reduce without moduli. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef FH_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define ROUNDS 5
#define FAIL(...)                     \
  do {                                \
    fprintf(stderr, __VA_ARGS__);     \
    fputc('\n', stderr);              \
    MPI_Abort(MPI_COMM_WORLD, 1);     \
  } while (0)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 4) FAIL("usage: fhelium_bench_dist_baseline cpu|cuda BYTES ITERATIONS");
  int cuda = strcmp(argv[1], "cuda") == 0;
  size_t n = (size_t)strtoull(argv[2], NULL, 10) / sizeof(uint64_t);
  int iters = atoi(argv[3]);
  if (n == 0 || iters < 1) FAIL("bad arguments");
  double t[ROUNDS];
  if (!cuda) {
    uint64_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    if (!x || !y) FAIL("out of memory");
    for (size_t i = 0; i < n; ++i) x[i] = (uint64_t)(i * 2654435761u + (unsigned)rank) & ((1ULL << 59) - 1);
    for (int r = -1; r < ROUNDS; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now_us();
      for (int k = 0; k < iters; ++k)
        if (n > 0x7fffffff || MPI_Allreduce(x, y, (int)n, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
          FAIL("MPI_Allreduce failed");
      if (r >= 0) t[r] = (now_us() - t0) / iters;
    }
    free(x);
    free(y);
  } else {
#ifdef FH_WITH_NCCL
    MPI_Comm local;
    int lrank = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &lrank);
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    if (cudaSetDevice(lrank) != cudaSuccess) FAIL("cudaSetDevice(%d) failed", lrank);
    ncclUniqueId id;
    if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) FAIL("ncclGetUniqueId failed");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, size, id, rank) != ncclSuccess) FAIL("ncclCommInitRank failed");
    cudaStream_t s;
    uint64_t *x, *y;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc((void **)&x, n * sizeof *x) != cudaSuccess || cudaMalloc((void **)&y, n * sizeof *y) != cudaSuccess)
      FAIL("CUDA allocation failed");
    cudaMemsetAsync(x, 1, n * sizeof *x, s);
    for (int r = -1; r < ROUNDS; ++r) {
      cudaStreamSynchronize(s);
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now_us();
      for (int k = 0; k < iters; ++k)
        if (ncclAllReduce(x, y, n, ncclUint64, ncclSum, comm, s) != ncclSuccess) FAIL("ncclAllReduce failed");
      if (cudaStreamSynchronize(s) != cudaSuccess) FAIL("cudaStreamSynchronize failed");
      if (r >= 0) t[r] = (now_us() - t0) / iters;
    }
    cudaFree(x);
    cudaFree(y);
    ncclCommDestroy(comm);
#else
    FAIL("built without NCCL");
#endif
  }
  /* the slowest rank's time counts */
  double worst[ROUNDS];
  MPI_Reduce(t, worst, ROUNDS, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    qsort(worst, ROUNDS, sizeof *worst, cmp);
    printf("baseline_us %.3f\n", worst[ROUNDS / 2]);
  }
  MPI_Finalize();
  return 0;
}
