/* fhelium launch boundary: the one seam through which every native operator
 * runs (ARCHITECTURE.md, "The launch boundary").
 *
 * An operator validates on the host, allocates its outputs, then submits
 * launches. A launch is a kernel id, a packed argument block (plain data:
 * device addresses, sizes, strides, constants), a device, a stream and the
 * storages the kernel touches.
 *   CUDA: the kernel is launched on the stream (so stream capture records
 *         it); every used storage is recorded on the stream (record-stream).
 *   CPU:  the kernel is called directly, or, while a host capture (tape) is
 *         active on this thread, the launch is appended to the tape: its
 *         argument block is copied and its storages retained, and nothing
 *         runs until the tape is replayed.
 * Copies and memsets are launches too.
 *
 * Ownership: fh_tape_new returns an owned tape (fh_tape_free). */
#ifndef FH_LAUNCH_H
#define FH_LAUNCH_H

#include "fh/core.h"
#include "fh/runtime.h"
#include "fh/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fh_kernel_id {
  FH_K_FILL = 0,   /* fh_fill_args */
  FH_K_COPY,       /* fh_copy_args: same-device strided copy with cast */
  FH_K_UNARY,      /* fh_ew_args */
  FH_K_BINARY,     /* fh_ew_args */
  FH_K_RNS,        /* fh_rns_args */
  FH_K_SUM,        /* fh_reduce_args */
  FH_K_COMPARE,    /* fh_compare_args */
  FH_K_COPY_BATCH, /* fh_copy_batch_args: small byte copies, sources device-accessible (CUDA only) */
  FH_K_BUILTIN_END,
  /* CKKS kernels follow (fh/ckks_kernels.h). */
  FH_K_MAX = 128
} fh_kernel_id;

typedef struct fh_launch {
  int32_t kernel; /* fh_kernel_id */
  fh_device device;
  fh_stream *stream; /* CUDA: borrowed stream; CPU: NULL */
  const void *args;  /* packed argument block (copied when recorded) */
  size_t args_size;
  fh_storage *const *uses; /* storages read or written (borrowed) */
  int nuses;
} fh_launch;

typedef fh_status (*fh_cpu_kernel_fn)(const void *args);
/* `stream` is a cudaStream_t. */
typedef fh_status (*fh_cuda_kernel_fn)(const void *args, void *stream);

/* Kernel tables, indexed by fh_kernel_id; an entry may be NULL (the launch
 * then fails with an error naming the kernel). Defined by the CPU and CUDA
 * back ends. */
extern const fh_cpu_kernel_fn fh__cpu_kernels[FH_K_MAX];
extern const fh_cuda_kernel_fn fh__cuda_kernels[FH_K_MAX]; /* all NULL without CUDA */
const char *fh_kernel_name(int kernel);

fh_status fh_launch_submit(const fh_launch *l);

/* Launch statistics (process-wide counters, for tests and tracing). */
uint64_t fh_launch_count(void);

/* ---- host capture ------------------------------------------------------- */
typedef struct fh_tape fh_tape;
fh_status fh_tape_new(fh_tape **out);
void fh_tape_free(fh_tape *t); /* releases the retained storages */
/* Make `t` the calling thread's active tape: CPU launches are recorded
 * instead of run. Fails (ExecutionError) when a tape is already active. */
fh_status fh_tape_begin(fh_tape *t);
void fh_tape_end(fh_tape *t);
fh_tape *fh_tape_active(void); /* borrowed; NULL when none */
/* Run every recorded launch in order. */
fh_status fh_tape_replay(fh_tape *t);
size_t fh_tape_length(const fh_tape *t);
/* Bytes of the storages the tape keeps (counted once each). */
size_t fh_tape_kept_bytes(const fh_tape *t);

/* Fails with CudaGraphCaptureError (stage "capture") when reading data of
 * `dev` on the host now would observe unfinished capture work: a host tape
 * is active (CPU) or the calling thread's CUDA device is capturing. `what`
 * names the operation for the message. */
fh_status fh_check_host_read(fh_device dev, const char *what);
/* CUDA side of the above (implemented by the CUDA layer). */
bool fh__cuda_is_capturing(fh_device dev);

#ifdef __cplusplus
}
#endif
#endif
