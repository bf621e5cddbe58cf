/* fhelium CUDA caching allocator, pinned-host caching allocator and
 * capture-private memory pools (implemented in engine/runtime/alloc.cu; a build
 * without CUDA has the same functions, failing with CudaError).
 *
 * The rules, in the manner of THCCachingAllocator:
 *
 * 1. Size classes. A request is rounded up to a class: 512 bytes at least,
 *    then four classes per power of two (n in (2^k, 2^(k+1)] rounds up to a
 *    multiple of 2^(k-2)), so a block carries at most 25% slack. Each block
 *    is one cudaMalloc of its class size; blocks are never split or merged,
 *    which keeps every rule below about whole blocks.
 *
 * 2. Home stream. A block belongs, while allocated, to the stream that was
 *    current on its device when it was allocated (its home stream). A freed
 *    block goes on the free list of (device, home stream, class): work on the
 *    home stream is ordered, so a later allocation on that stream may reuse
 *    it at once. An allocation on stream S takes a block of its class from
 *    S's list, else an idle block (one with no stream: see 4 and 6), else
 *    calls cudaMalloc. Blocks are never handed across streams otherwise.
 *
 * 3. Record-stream. Every launch records each storage it touches on its
 *    stream (fh_storage_record_stream, done by the launch boundary and by the
 *    cross-device copies). A stream other than the home stream is remembered
 *    with the block (and kept alive by a reference). When the block is freed,
 *    an event is recorded on each such stream and the block waits in the
 *    pending list; it returns to its home stream's free list only when all of
 *    those events have completed. Pending events are polled (cudaEventQuery,
 *    never waited for) at each allocation.
 *
 * 4. Nothing is returned to CUDA except by fh_cuda_empty_cache, or when
 *    cudaMalloc fails: then the allocator waits for the pending events, frees
 *    every cached block of the device, and retries once; if that fails too
 *    the allocation is a MemoryError that states what is allocated and
 *    reserved.
 *
 * 5. Capture-private pools (fh_mempool). Between fh_mempool_begin(p) and
 *    fh_mempool_end(p), every allocation on p's device comes from p: from p's
 *    idle blocks of the class, else an idle block of the class from the
 *    device cache (one no stream may still use: its events completed and it
 *    is free for no particular stream; the pool owns it from then on), else
 *    a new cudaMalloc (legal during capture); never a device-cache block
 *    that is free only for one stream (work on that stream may still use
 *    it). The device cache cannot be given back to CUDA during a capture,
 *    so an out-of-memory there is final (the message says to close
 *    programs or empty the cache before capturing). While any pool is active (on any device),
 *    every free of a block (device or pinned) is deferred: it makes no CUDA
 *    call at all (no cudaFree, no event record on a capturing stream, no
 *    event query, which capture forbids), and no pending event is polled.
 *    When the last active pool ends, the deferred frees are processed. A
 *    free whose streams are found capturing outside any pool (a capture
 *    begun elsewhere) is deferred the same way and retried at the next
 *    allocation. A pool block freed outside a capture goes back to its
 *    pool, never to the device cache, once events recorded on its home
 *    stream and every stream that used it have completed; only a later
 *    capture into the same pool reuses it (a graph's replays keep writing
 *    the addresses it captured). fh_mempool_free gives the pool's idle
 *    blocks to the device cache as idle blocks; blocks still allocated or
 *    pending follow when they are freed.
 *
 * 6. Streams die. When a stream is destroyed, its free blocks (and pending
 *    blocks whose home it was) become idle once an event recorded on the
 *    stream at destruction has completed. A block holds a reference to its
 *    home stream while allocated and to every stream it was used on until
 *    its events are recorded, so no stream a block needs is destroyed early.
 *
 * 7. Pinned host memory (cudaHostAlloc, portable) follows the same classes.
 *    Pinned blocks have no home stream: every stream that uses one (copies)
 *    is recorded, and a freed block is reused only after events recorded on
 *    those streams have completed; a block never used by a stream is idle at
 *    once.
 *
 * Thread safety: one mutex per device and one for the pinned allocator.
 * Storage free functions may run on any thread (Lua's GC, host callbacks).
 *
 * Ownership: fh_mempool_new returns a pool the caller frees with
 * fh_mempool_free. Statistics are copied into caller memory. */
#ifndef FH_CUDA_ALLOC_H
#define FH_CUDA_ALLOC_H

#include "fh/core.h"
#include "fh/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Counters of one allocator. Byte counts are class sizes (what the
 * allocator holds), except `requested`. */
typedef struct fh_memory_stats {
  uint64_t allocated;      /* bytes in blocks handed out now */
  uint64_t requested;      /* bytes asked for by the blocks handed out now */
  uint64_t reserved;       /* bytes obtained from CUDA (cudaMalloc / cudaHostAlloc) and not yet freed */
  uint64_t peak_allocated; /* maximum of `allocated` since start or the last reset */
  uint64_t peak_reserved;
  uint64_t active_blocks;   /* blocks handed out now */
  uint64_t cached_blocks;   /* free blocks ready for reuse (device cache or pools) */
  uint64_t pending_blocks;  /* freed blocks waiting for their stream events */
  uint64_t deferred_frees;  /* frees deferred by an active capture, not yet processed */
  uint64_t allocations;     /* allocation requests served (count) */
  uint64_t frees;           /* blocks freed (count) */
  uint64_t cuda_allocs;     /* cudaMalloc / cudaHostAlloc calls that succeeded */
  uint64_t cuda_frees;      /* cudaFree / cudaFreeHost calls */
  uint64_t reuses;          /* allocations served from the cache */
  uint64_t stream_events;   /* events recorded to guard freed blocks (record-stream) */
  uint64_t ooms;            /* allocations that failed for lack of memory */
  uint64_t pool_reserved;   /* part of `reserved` held by capture-private pools */
} fh_memory_stats;

/* Statistics of CUDA device `index` (< 0: the current device). */
fh_status fh_cuda_memory_stats(int index, fh_memory_stats *out);
/* Reset the peaks of device `index` to the current values. */
fh_status fh_cuda_reset_peak_memory_stats(int index);
/* Statistics of the pinned host allocator. */
fh_status fh_pinned_memory_stats(fh_memory_stats *out);
/* Give every idle cached block (device caches of every device not now
 * capturing, and the pinned cache) back to CUDA; polls pending events
 * first. Blocks in capture-private pools stay. */
fh_status fh_cuda_empty_cache(void);

/* ---- capture-private pools ------------------------------------------- */
typedef struct fh_mempool fh_mempool;
/* A new, empty pool for CUDA device `dev`. */
fh_status fh_mempool_new(fh_device dev, fh_mempool **out);
/* Route every allocation on the pool's device to the pool and defer frees
 * (rule 5). ExecutionError when a pool is already active on the device. */
fh_status fh_mempool_begin(fh_mempool *p);
/* Stop routing and process the frees deferred meanwhile. */
fh_status fh_mempool_end(fh_mempool *p);
/* Release the pool (ends it first if active). The caller has finished all
 * work that uses the pool's memory (graph replays): its idle blocks go to
 * the device cache as idle blocks at once. NULL is a no-op. */
void fh_mempool_free(fh_mempool *p);
/* Bytes reserved by the pool and the number of its blocks. */
void fh_mempool_usage(const fh_mempool *p, uint64_t *reserved, uint64_t *blocks);

/* ---- test aids ---------------------------------------------------------- */
/* Enqueue a kernel on `s` that spins for `ms` milliseconds (a long-running
 * kernel for ordering tests and benchmarks). */
fh_status fh_cuda_spin(fh_stream *s, double ms);
/* Launch a kernel on `s` that writes far out of bounds, wait for it, and
 * return the CudaError it ends with (cudaErrorIllegalAddress, naming
 * "kernel 'fault'"): the device's context is then broken for the rest of the
 * process (fh/runtime.h, "broken CUDA contexts"). engine/runtime/test_aid.cu;
 * returns nothing else. */
fh_status fh_cuda_fault_kernel(fh_stream *s);
/* Profiling aid: cudaProfilerStart (on) / cudaProfilerStop (off), so a
 * profiler started with its capture off (ncu --profile-from-start off)
 * records only the range in between. */
fh_status fh_cuda_profiler(bool on);
/* A minimal CUDA graph capture for testing the pools (the execution layer
 * has the real one): begin routes allocations to `p` and starts a
 * thread-local capture on `s` (which the caller makes current); end stops
 * the capture, then the pool (processing deferred frees), then, when
 * `replays` > 0, instantiates the graph, launches it that many times on `s`
 * and synchronizes. */
fh_status fh__cuda_test_capture_begin(fh_stream *s, fh_mempool *p);
fh_status fh__cuda_test_capture_end(fh_stream *s, fh_mempool *p, int replays);

#ifdef __cplusplus
}
#endif
#endif
