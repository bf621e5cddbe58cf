/* fhelium core: status codes, the thread-local error record, reference
 * counting, devices as values (parsing and availability: fh/runtime.h).
 *
 * Error protocol. Every engine function that can fail returns fh_status.
 * On failure it has called fh_error_set() (or a variant), which records the
 * kind, a message and optionally a tree path and a capture stage in a
 * thread-local record; the Lua binding turns that record into an error
 * object. A failing function leaves its outputs untouched and owns nothing
 * new: "validate, then allocate, then launch".
 *
 * Ownership. Objects with a `rc` field are reference counted; a function
 * documented as returning "a new reference" hands one reference to the
 * caller, who releases it with the object's _release function. "Borrowed"
 * results stay owned by their source and must not be released.
 *
 * The engine knows nothing of Lua. */
#ifndef FH_CORE_H
#define FH_CORE_H

#ifdef __cplusplus
/* C++ translation units (the CUDA layer) spell C11 atomics through <atomic>;
 * std::atomic<T> has the layout of _Atomic T for the lock-free types used. */
#include <atomic>
typedef std::atomic<int> atomic_int;
typedef std::atomic<size_t> atomic_size_t;
typedef std::atomic<uint_fast64_t> atomic_uint_fast64_t;
using std::atomic_fetch_add;
using std::atomic_fetch_sub;
using std::atomic_init;
using std::atomic_load;
using std::atomic_store;
#else
#include <stdatomic.h>
#endif
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* the allocation and I/O wrappers every engine file uses (fault builds count them) */
#include "fh/fault.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes; each non-OK code is an error kind of docs/api.md. */
typedef enum fh_status {
  FH_OK = 0,
  FH_ERR_GENERIC,     /* FHEliumError */
  FH_ERR_VALUE,       /* ValueError */
  FH_ERR_TYPE,        /* TypeError */
  FH_ERR_STATE,       /* StateError */
  FH_ERR_CUDA,        /* CudaError */
  FH_ERR_MEMORY,      /* MemoryError (host or device allocation failed) */
  FH_ERR_EXECUTION,   /* ExecutionError */
  FH_ERR_EXEC_INPUT,  /* ExecutionInputError */
  FH_ERR_GRAPH_INPUT, /* CudaGraphInputError */
  FH_ERR_CAPTURE,     /* CudaGraphCaptureError */
  FH_ERR_IO,          /* IOError: the operating system failed a file operation (open, read, write, fsync,
                         rename...); the message names the path and gives strerror */
  FH_STATUS_COUNT
} fh_status;

/* The kind name of a status ("ValueError", ...); FH_OK gives "OK". */
const char *fh_status_kind(fh_status s);

/* Record an error for the calling thread and return `s`. The message is
 * printf-formatted and truncated to FH_ERROR_MESSAGE_MAX bytes. Path and
 * stage are cleared. */
#define FH_ERROR_MESSAGE_MAX 1024
fh_status fh_error_set(fh_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Attach a tree path (e.g. `source["values"][1]`) / a capture stage
 * ("warmup", "capture", "first replay") to the current error. */
void fh_error_set_path(const char *path);
void fh_error_set_stage(const char *stage);
/* Prefix the current message with "<prefix>: " (used to add context). */
void fh_error_prefix(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* The calling thread's current error record (borrowed, valid until the next
 * fh_error_* call on this thread). Path and stage are "" when unset. */
fh_status fh_error_status(void);
const char *fh_error_message(void);
const char *fh_error_path(void);
const char *fh_error_stage(void);
void fh_error_clear(void);
/* A copy of the calling thread's error record. Code that may record and
 * clear errors of its own while another error is pending (Lua finalizers,
 * which run at any allocation, also between a failed call and the raise of
 * its error) saves the record first and restores it after. */
typedef struct fh_error_saved {
  fh_status status;
  char message[FH_ERROR_MESSAGE_MAX];
  char path[512];
  char stage[32];
} fh_error_saved;
void fh_error_save(fh_error_saved *out);
void fh_error_restore(const fh_error_saved *saved);

/* Reference counts (atomic: the CUDA host callbacks may release). */
typedef struct fh_refcount {
  atomic_int n;
} fh_refcount;
static inline void fh_rc_init(fh_refcount *r) { atomic_init(&r->n, 1); }
static inline void fh_rc_retain(fh_refcount *r) { atomic_fetch_add(&r->n, 1); }
/* True when the count dropped to zero: the caller destroys the object. */
static inline bool fh_rc_release(fh_refcount *r) { return atomic_fetch_sub(&r->n, 1) == 1; }

/* Devices. A device is a value: type plus CUDA ordinal (0 for the CPU). */
typedef enum fh_device_type { FH_DEVICE_CPU = 0, FH_DEVICE_CUDA = 1 } fh_device_type;
typedef struct fh_device {
  int32_t type;  /* fh_device_type */
  int32_t index; /* CUDA ordinal; 0 for CPU */
} fh_device;

#define FH_DEVICE_NAME_MAX 24
static inline fh_device fh_cpu(void) { fh_device d = {FH_DEVICE_CPU, 0}; return d; }
static inline bool fh_device_eq(fh_device a, fh_device b) { return a.type == b.type && a.index == b.index; }
static inline bool fh_device_is_cuda(fh_device d) { return d.type == FH_DEVICE_CUDA; }
/* Writes "cpu" or "cuda:N" into buf (FH_DEVICE_NAME_MAX bytes). */
const char *fh_device_name(fh_device d, char *buf);

/* Checked size arithmetic: false on overflow. */
static inline bool fh_mul_overflow(size_t a, size_t b, size_t *out) { return __builtin_mul_overflow(a, b, out); }
static inline bool fh_add_overflow(size_t a, size_t b, size_t *out) { return __builtin_add_overflow(a, b, out); }

/* Host threads for the CPU kernels (OpenMP over the rows of a launch): FHELIUM_NUM_THREADS
 * at the first call, else every core; 1 in a build without OpenMP. Results never depend
 * on the count (every row is computed by one thread). fh_set_num_threads(n): ValueError
 * unless 1 <= n <= 4096; it affects launches that start afterwards. */
int fh_num_threads(void);
fh_status fh_set_num_threads(int n);
bool fh_built_with_openmp(void);

/* Vector instructions of the CPU kernels: "avx512ifma" when the build's compiler
 * has them (x86-64 gcc or clang), the CPU supports AVX-512F and IFMA, and
 * FHELIUM_CPU_SIMD is not "0" at the first call; otherwise "none". Results never
 * depend on it (the vector kernels give the scalar ones' words). A static string.
 * fh_set_cpu_simd(false) turns them off, true back on where supported (for the
 * specs that compare both); it affects launches that start afterwards. */
const char *fh_cpu_simd(void);
void fh_set_cpu_simd(bool on);

/* Build information. */
const char *fh_version(void);
bool fh_built_with_cuda(void);

#ifdef __cplusplus
}
#endif
#endif
