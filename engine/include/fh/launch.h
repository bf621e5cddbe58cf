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

/* Kernel ids are small integers below FH_K_MAX, allocated by the layers
 * that implement them (fh/kernels.h: the tensor kernels, from 0;
 * fh/ckks_kernels.h: the CKKS kernels after them). A layer registers its
 * kernels (fh_launch_register) before it first submits one of them; a launch
 * of an id without an implementation for its device fails with an error
 * naming the kernel. */
#define FH_K_MAX 128

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

/* Register the kernels with ids first .. first + count - 1: names[i] (static
 * strings), cpu[i] and cuda[i] (either table may be NULL, an entry may be
 * NULL: no implementation for that device). A layer calls it once, under its
 * own pthread_once, before its first submit; registering an id again with
 * the same entries is harmless. */
void fh_launch_register(int first, int count, const char *const *names, const fh_cpu_kernel_fn *cpu,
                        const fh_cuda_kernel_fn *cuda);
/* The registered name of a kernel id ("kernel <id>" when none). */
const char *fh_kernel_name(int kernel);

fh_status fh_launch_submit(const fh_launch *l);
/* The traced path of fh_launch_submit (engine/runtime/trace.c): groups the
 * launch into the open launch group, times it, and calls `run`. */
fh_status fh__trace_submit(const fh_launch *l, fh_status (*run)(const fh_launch *));

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

/* True while launches for `dev` from the calling thread are recorded rather
 * than run: a host tape is active (CPU) or the thread's CUDA capture of that
 * device is in progress. The launch boundary owns this fact; layers above ask
 * it here (randomness refuses capture, host reads refuse it, ...). */
bool fh_launch_capturing(fh_device dev);

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
